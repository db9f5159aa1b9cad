"""ApiClient's calls of /api/algorithms/ (an outside algorithm's source file), kept beside
api.py so that module stays the original client's methods: ApiClient derives from this."""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path


class AlgorithmCalls:
    """Upload an algorithm's source and fetch it back; `_submit` is ApiClient's."""

    _submit: Callable[..., Future]  # ApiClient's: one request on its session, in its pool

    def upload_algorithm(self, path: str | os.PathLike) -> Future:
        """Upload an algorithm's source file (staff only); answers {sha256, name, api, options,
        size}: runs name it by `sha256` (create_run's `algorithm_source`). The master reads it
        without running it and refuses (400 naming `source`) a broken declaration."""
        python = {"Content-Type": "text/x-python; charset=utf-8"}
        return self._submit("POST", "algorithms/", data=Path(path).read_bytes(), headers=python)

    def get_algorithm(self, sha256: str) -> Future:
        """An uploaded algorithm's source by its SHA-256 (the response's bytes)."""
        return self._submit("GET", f"algorithms/{sha256}/", headers={"Accept": "text/x-python"})
