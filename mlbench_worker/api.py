"""`from mlbench_worker.api import ApiClient`: the import path of the original client's users,
kept while the client itself lives in mlbench_worker/client/api.py. The names are the
original client module's: the client, its error, and the tables of backends, tasks and
images it offered."""

from mlbench_worker.client.api import (
    CUSTOM_IMAGE,
    MLBENCH_BACKENDS,
    MLBENCH_IMAGES,
    MLBENCH_TASKS,
    ApiClient,
    ApiError,
)

__all__ = [
    "CUSTOM_IMAGE",
    "MLBENCH_BACKENDS",
    "MLBENCH_IMAGES",
    "MLBENCH_TASKS",
    "ApiClient",
    "ApiError",
]
