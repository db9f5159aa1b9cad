"""mlbench worker: reference training code, the API client and the `mlbench` command.

Importing this package (and its `api` and `cli` modules) must not import torch: the command
line and the client have to start fast and install without it.
"""

__version__ = "0.2.0.dev0"
