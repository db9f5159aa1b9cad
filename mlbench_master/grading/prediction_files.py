"""A run's predictions files as the master keeps them: one per evaluation, under
``<MLBENCH_HOME>/predictions/<run id>/``, named as the worker names them
(``predictions-step<10 digits>.npz``, mlbench_worker/shared/evaluation/predictions.py).

Why files and not rows: a file is the evaluation exactly as the run submitted it, so
``mlbench evaluate`` and anyone downloading it can grade it again byte for byte. A posted
body is written to a temporary file beside the run's files, at most the cap's bytes of it
(never more in memory than one chunk), and published by one rename once it was graded
(grading.py), so a reader never meets a half-written file or one whose grade was refused.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from mlbench_master.grading import receive
from mlbench_worker.shared.evaluation import predictions

CHUNK = receive.CHUNK


@dataclass(frozen=True)
class StoredFile:
    step: int
    bytes: int
    sha256: str
    path: Path


def folder(run_id: int) -> Path:
    return Path(settings.MLBENCH_HOME) / "predictions" / str(int(run_id))


def path(run_id: int, step: int) -> Path:
    return folder(run_id) / predictions.file_name(step)


def receive_file(
    read: Callable[[int], bytes],
    run_id: int,
    declared: int | None,
    cap: int,
    *,
    into: Path | None = None,
    npz: bool = True,
    what: str = "the predictions file",
    setting: str = "MLBENCH_PREDICTIONS_MAX_BYTES",
) -> Path:
    """The body in a temporary file of the run's folder (or of `into`: the run's model,
    model_files.py), read by receive.py's one bounded reader; receive.TooLarge (nothing
    kept) when it is over `cap` bytes, or, for an `npz` body, unpacks to more."""
    target = into if into is not None else folder(run_id)
    tmp = receive.receive(read, declared, cap, target, what=what, setting=setting)
    try:
        if npz:
            unpacked = _unpacked_bytes(tmp)
            if unpacked > cap:
                raise receive.too_large(f"{unpacked} bytes when unpacked", cap, what, setting)
    except BaseException:
        discard(tmp)
        raise
    return tmp


def _unpacked_bytes(file: Path) -> int:
    """What the arrays of a .npz take once read (its members' declared sizes; the zip reader
    never gives more of a stored or deflated member): a compressed file could otherwise
    unpack to far more than the cap. 0 when it is not a zip at all (the reader then says
    what it is)."""
    try:
        with zipfile.ZipFile(file) as zf:
            infos = zf.infolist()
    except Exception:  # noqa: BLE001 - any damage: the reader then says what is wrong
        return 0
    for info in infos:
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise predictions.PredictionsRefused(
                f"the posted file's member {info.filename!r} is compressed with method "
                f"{info.compress_type}; a .npz holds stored or deflated members (np.savez, "
                "np.savez_compressed)"
            )
    return sum(info.file_size for info in infos)


def publish(tmp: Path, run_id: int, step: int) -> Path:
    """Put a received file in place as the evaluation of `step` (grading.py has checked that
    none is there: a step's file is write-once)."""
    final = path(run_id, step)
    os.replace(tmp, final)
    return final


def discard(tmp: Path) -> None:
    tmp.unlink(missing_ok=True)


def same_bytes(stored: Path, received: Path) -> bool:
    """Whether a received file holds exactly the stored one's bytes (a retried post)."""
    try:
        if stored.stat().st_size != received.stat().st_size:
            return False
        return _sha256(stored) == _sha256(received)
    except FileNotFoundError:
        return False


_DIGESTS: dict[tuple, str] = {}
_DIGESTS_LOCK = threading.Lock()


def _sha256(file: Path) -> str:
    """The file's SHA-256, remembered while the file is the same (inode, size, time): the
    list of a long run's files is asked for often and its files never change in place."""
    st = file.stat()
    key = (str(file), st.st_ino, st.st_size, st.st_mtime_ns)
    with _DIGESTS_LOCK:
        known = _DIGESTS.get(key)
    if known is not None:
        return known
    digest = hashlib.sha256()
    with open(file, "rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    value = digest.hexdigest()
    with _DIGESTS_LOCK:
        if len(_DIGESTS) > 10000:
            _DIGESTS.clear()
        _DIGESTS[key] = value
    return value


def stored(run_id: int) -> list[StoredFile]:
    """The run's files in step order (temporary uploads left out)."""
    out = []
    for file in predictions.files_in(folder(run_id)):
        digits = file.name[len(predictions.PREFIX) : -len(predictions.SUFFIX)]
        if not digits.isdigit():
            continue
        try:
            out.append(StoredFile(int(digits), file.stat().st_size, _sha256(file), file))
        except FileNotFoundError:  # replaced or deleted while listed
            continue
    return out


def remove(run_id: int) -> None:
    """Delete every file of a run (the run is being deleted)."""
    shutil.rmtree(folder(run_id), ignore_errors=True)
