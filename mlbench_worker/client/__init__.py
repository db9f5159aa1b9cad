"""What a user runs: `ApiClient` (api.py), finding the master (discovery.py) and the `mlbench`
command (cli/). No torch, no TensorFlow: the client installs and starts without them."""
