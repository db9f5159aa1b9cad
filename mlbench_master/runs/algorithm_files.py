"""Outside algorithms' source files as the master keeps them: ``<MLBENCH_HOME>/algorithms/
<sha256>.py``, one file per distinct content.

Why files addressed by their SHA-256 and no table: a run names the file by its hash
(Run.algorithm_source), the rank checks the hash of what it fetched before importing it,
and the same bytes uploaded twice are one file. Nothing is ever replaced or removed (a
run's result rests on the exact code it ran; an imported run brings its file along), so a
file, once in place, needs no lock: it is written to a temporary name and renamed, and a
reader meets the whole file or none.

What is stored was checked first: the one bounded reader (grading/receive.py) takes the
body under MLBENCH_MAX_ALGORITHM_BYTES, and the declaration reader
(mlbench_worker/shared/algorithm_source.py) refuses anything that is not an algorithm
module; a refused upload leaves nothing behind.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from mlbench_master.grading import receive
from mlbench_worker.shared import algorithm_source
from mlbench_worker.shared.algorithm_source import Declaration, DeclarationError

SHA256 = re.compile(r"[0-9a-f]{64}")
SETTING = "MLBENCH_MAX_ALGORITHM_BYTES"


@dataclass(frozen=True)
class Stored:
    """An algorithm file in the store: its hash, declaration and size; `new` when this call
    put it there (False: the same bytes were stored already)."""

    sha256: str
    declaration: Declaration
    size: int
    new: bool


def folder() -> Path:
    return Path(settings.MLBENCH_HOME) / "algorithms"


def path_of(sha256: str) -> Path:
    """The file of `sha256` (ValueError for anything but 64 lower-case hex digits, so a
    name can never reach outside the folder)."""
    if not SHA256.fullmatch(sha256 or ""):
        raise ValueError(f"{sha256[:80]!r} is not a SHA-256 (64 lower-case hex digits)")
    return folder() / f"{sha256}.py"


def cap() -> int:
    return int(settings.MLBENCH_MAX_ALGORITHM_BYTES)


def receive_upload(read: Callable[[int], bytes], declared: int | None) -> Stored:
    """The body read by `read(n)` (receive.TooLarge past the cap), checked and stored;
    DeclarationError, nothing kept, when it is not an algorithm module."""
    tmp = receive.receive(
        read, declared, cap(), folder(), what="the algorithm", setting=SETTING, suffix=".py"
    )
    try:
        return _publish(tmp, tmp.read_bytes())
    finally:
        tmp.unlink(missing_ok=True)  # published by now (renamed), unless refused


def store_bytes(source: bytes) -> Stored:
    """`source` (an imported bundle's member) checked and stored as an upload is."""
    if len(source) > cap():
        raise receive.too_large(f"{len(source)} bytes", cap(), "the algorithm", SETTING)
    folder().mkdir(parents=True, exist_ok=True)
    tmp = folder() / f"{receive.TMP_PREFIX}{os.getpid()}-{algorithm_source.sha256(source)}.py"
    tmp.write_bytes(source)
    try:
        return _publish(tmp, source)
    finally:
        tmp.unlink(missing_ok=True)


def _publish(tmp: Path, source: bytes) -> Stored:
    declaration = algorithm_source.read(source)
    digest = algorithm_source.sha256(source)
    target = path_of(digest)
    new = not target.exists()
    if new:
        os.replace(tmp, target)
    return Stored(digest, declaration, len(source), new)


def source(sha256: str) -> bytes | None:
    """The stored bytes of `sha256`; None when there are none (or it is no hash)."""
    try:
        return path_of(sha256).read_bytes()
    except (ValueError, FileNotFoundError, NotADirectoryError):
        return None


def declaration(sha256: str) -> Declaration | None:
    """The declaration of the stored file `sha256`; None when none is stored.
    DeclarationError when it no longer passes (a built-in algorithm took its NAME since,
    or this master no longer runs its API version)."""
    found = source(sha256)
    return None if found is None else algorithm_source.read(found)


def answer(stored: Stored) -> dict:
    """What POST /api/algorithms/ answers for `stored`."""
    declared = stored.declaration
    return {
        "sha256": stored.sha256,
        "name": declared.name,
        "api": declared.api,
        "options": algorithm_source.served(declared),
        "size": stored.size,
        "class_name": declared.class_name,
        "methods": list(declared.methods),
    }


__all__ = [
    "SHA256", "DeclarationError", "Stored", "answer", "declaration", "folder", "path_of",
    "receive_upload", "source", "store_bytes",
]  # fmt: skip
