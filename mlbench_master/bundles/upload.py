"""A bundle received over HTTP, into a temporary file, bounded by MLBENCH_BUNDLE_MAX_BYTES
through the one reader of every upload (grading/receive.py): the bundle reader needs the
whole file. The file is removed after the import, whatever its outcome."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from django.conf import settings

from mlbench_master.bundles.refusals import BundleRefused
from mlbench_master.grading import receive


@contextlib.contextmanager
def received(read: Callable[[int], bytes], declared: int | None) -> Iterator[Path]:
    """The body, read by `read(n)`, in a temporary file for the length of the block."""
    cap = int(settings.MLBENCH_BUNDLE_MAX_BYTES)
    path = receive.receive(
        read,
        declared,
        cap,
        Path(tempfile.gettempdir()),
        what="the bundle",
        setting="MLBENCH_BUNDLE_MAX_BYTES",
        suffix=".zip",
    )
    try:
        if path.stat().st_size == 0:
            raise BundleRefused("the body is empty: send the bundle file's bytes")
        yield path
    finally:
        path.unlink(missing_ok=True)
