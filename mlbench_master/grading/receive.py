"""Every upload a client sends the master (predictions, models, bundles) read into a file,
bounded: the readers need whole files (a zip's directory is at its end), and no request may
fill the disk or the memory. One reader, so every upload has the same limit rule: a body
declared or found longer than its cap is refused (TooLarge, answered 413) and nothing of it
is kept; it is read in chunks, never more than one in memory.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

CHUNK = 1024 * 1024
TMP_PREFIX = ".upload-"


class TooLarge(Exception):
    """A body over its cap (the message names the setting that sets it)."""


def too_large(size: str, cap: int, what: str, setting: str) -> TooLarge:
    return TooLarge(f"{what} is {size}; this master takes at most {cap} bytes ({setting})")


def receive(
    read: Callable[[int], bytes],
    declared: int | None,
    cap: int,
    folder: Path,
    *,
    what: str,
    setting: str,
    suffix: str = ".tmp",
) -> Path:
    """The body, read by `read(n)` in chunks, in a new temporary file of `folder` (made if
    missing); TooLarge, nothing kept, when it is declared or found longer than `cap`. The
    caller publishes or removes the file."""
    if declared is not None and declared > cap:
        raise too_large(f"{declared} bytes", cap, what, setting)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f"{TMP_PREFIX}{uuid.uuid4().hex}{suffix}"
    size = 0
    try:
        with open(tmp, "wb") as fh:
            while chunk := read(CHUNK):
                size += len(chunk)
                if size > cap:
                    raise too_large(f"over {cap} bytes", cap, what, setting)
                fh.write(chunk)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp
