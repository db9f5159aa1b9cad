"""A bundle received over HTTP, into a temporary file, bounded: the reader needs the whole
file (a zip's directory is at its end), and no request may fill the disk or the memory.
The file is read in chunks and removed after the import, whatever its outcome."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from django.conf import settings

from mlbench_master.bundles.refusals import BundleRefused, UploadTooLarge

CHUNK = 1024 * 1024


def _too_large(size: str, cap: int) -> UploadTooLarge:
    return UploadTooLarge(
        f"the bundle is {size}; this master takes at most {cap} bytes (MLBENCH_BUNDLE_MAX_BYTES)"
    )


@contextlib.contextmanager
def received(read: Callable[[int], bytes], declared: int | None) -> Iterator[Path]:
    """The body, read by `read(n)`, in a temporary file for the length of the block."""
    cap = int(settings.MLBENCH_BUNDLE_MAX_BYTES)
    if declared is not None and declared > cap:
        raise _too_large(f"{declared} bytes", cap)
    fd, name = tempfile.mkstemp(prefix="mlbench-upload-", suffix=".zip")
    path = Path(name)
    try:
        size = 0
        with os.fdopen(fd, "wb") as fh:
            while chunk := read(CHUNK):
                size += len(chunk)
                if size > cap:
                    raise _too_large(f"over {cap} bytes", cap)
                fh.write(chunk)
        if size == 0:
            raise BundleRefused("the body is empty: send the bundle file's bytes")
        yield path
    finally:
        path.unlink(missing_ok=True)
