"""The two ways a bundle is refused, apart from the modules that raise them so the API's
error mapping (api/errors.py) can name them without importing the writer or the reader."""

from __future__ import annotations


class BundleRefused(Exception):
    """A bundle that is not imported, and why; `status`: the API's answer (400, or 409
    for one this master cannot take for another reason than its content)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class NotExportable(Exception):
    """Runs that cannot travel (still running, missing files); the API answers 409."""


class UploadTooLarge(Exception):
    """A bundle over MLBENCH_BUNDLE_MAX_BYTES (the API answers 413)."""
