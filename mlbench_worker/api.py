"""`from mlbench_worker.api import ApiClient`: the import path the original client's users
know, kept while the client itself lives in mlbench_worker/client/."""

from mlbench_worker.client.api import ApiClient

__all__ = ["ApiClient"]
