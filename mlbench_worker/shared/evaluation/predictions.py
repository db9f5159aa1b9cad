"""The predictions format: what a run hands the evaluator at each of its evaluations.

One file per evaluation, ``predictions-step<STEP, 10 digits>.npz``: a numpy ``.npz`` (a zip
of ``.npy`` arrays, written by ``np.savez`` or ``np.savez_compressed``), holding

- ``format``: the text ``mlbench-predictions-1``;
- ``test_set_digest``: the SHA-256 (hex) of the test set's labels, in the order the
  predictions follow, as little-endian int64 (``digest_of``): which set was predicted;
- ``step`` (integer), ``epoch`` and ``elapsed`` (numbers): the evaluation's training step,
  epoch and seconds on the benchmark clock, as the run reports them beside its accuracy;
- for a classification task (1a, 1b): ``predicted_class``, N integers in 0..classes-1, and
  where the task grades top-5 (1b) ``predicted_top5``, N x 5 distinct integers, best first
  (so its first column is ``predicted_class``);
- for task 2: ``predicted_label``, N integers, -1 or +1.

Why a zip of ``.npy`` and not ``.npy`` plus a JSON header: one file is one evaluation, so it
is published by one rename and can never be found half written or paired with another
evaluation's header; the names inside say what each array is; numpy writes and reads it
with no other library (``np.savez`` / ``np.load``), and other languages read it as a zip of
``.npy`` files, a published format. The header values are 0-d arrays, so the file is read
with ``allow_pickle=False`` and no object in it can run code. Digesting the labels rather
than naming the set means every solver can compute it (it holds the labels it evaluates on)
and a test set read in another order is refused, not graded against shifted labels.

Anyone's code can write the format with numpy alone; docs/checking.rst ("The predictions
format") shows how. `write` and `read` are this project's writer and reader: `read` checks
the file's shape (fields, types, header values) and refuses anything else with
`PredictionsRefused` naming the problem; whether the predictions fit the run's test set
(digest, length, class range) is the evaluator's check (evaluator.py).
"""

from __future__ import annotations

import hashlib
import math
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FORMAT = "mlbench-predictions-1"
CLASS, TOP5, LABEL = "predicted_class", "predicted_top5", "predicted_label"
HEADER = ("format", "test_set_digest", "step", "epoch", "elapsed")
PREDICTIONS = (CLASS, TOP5, LABEL)
PREFIX, SUFFIX = "predictions-step", ".npz"


class PredictionsRefused(ValueError):
    """Predictions the evaluator will not grade; the message names the problem."""


@dataclass(frozen=True)
class Predictions:
    """One evaluation's predictions, as read from its file (arrays as written)."""

    test_set_digest: str
    step: int
    epoch: float
    elapsed: float
    arrays: dict[str, np.ndarray]  # some of PREDICTIONS
    source: str = ""  # the file it came from, for messages


def digest_of(labels: np.ndarray) -> str:
    """The test set digest: SHA-256 of the labels, in order, as little-endian int64."""
    return hashlib.sha256(np.ascontiguousarray(labels, dtype="<i8").tobytes()).hexdigest()


def file_name(step: int) -> str:
    """The file of the evaluation at `step`; sorted names are in step order."""
    return f"{PREFIX}{int(step):010d}{SUFFIX}"


def write(
    folder: str | Path,
    *,
    test_set_digest: str,
    step: int,
    epoch: float,
    elapsed: float,
    predicted_class: np.ndarray | None = None,
    predicted_top5: np.ndarray | None = None,
    predicted_label: np.ndarray | None = None,
) -> Path:
    """Write one evaluation's file into `folder` (under a temporary name, then renamed, so a
    reader never sees half a file); returns its path."""
    given = {CLASS: predicted_class, TOP5: predicted_top5, LABEL: predicted_label}
    arrays = {name: np.asarray(a) for name, a in given.items() if a is not None}
    if not arrays:
        raise PredictionsRefused(f"nothing to write: give one of {', '.join(PREDICTIONS)}")
    for name, array in arrays.items():
        if array.dtype.kind not in "iu":  # refused here already, not only when graded
            raise PredictionsRefused(f"{name} is {array.dtype}; the format holds integers")
    header = {
        "format": np.array(FORMAT),
        "test_set_digest": np.array(str(test_set_digest)),
        "step": np.array(int(step), dtype=np.int64),
        "epoch": np.array(float(epoch)),
        "elapsed": np.array(float(elapsed)),
    }
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / file_name(step)
    tmp = folder / f".{target.name}.{os.getpid()}.tmp"
    with open(tmp, "wb") as fh:
        np.savez(fh, **header, **arrays)
    os.replace(tmp, target)
    return target


def _scalar(values: dict[str, np.ndarray], name: str, kind: str, where: str) -> object:
    value = values[name]
    if value.shape != () or value.dtype.kind not in kind:
        wanted = {"U": "a text", "iu": "an integer", "iuf": "a number"}[kind]
        raise PredictionsRefused(
            f"{where}: '{name}' must be {wanted} (a 0-d array); found {value.dtype} "
            f"of shape {value.shape}"
        )
    return value.item()


def read(path: str | Path) -> Predictions:
    """The predictions in `path`; PredictionsRefused naming the problem when the file is not
    in the format (not a .npz, a field missing or unknown, a header value of the wrong type)."""
    path = Path(path)
    where = str(path)
    try:
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise PredictionsRefused(f"{where} is a single .npy array, not a .npz file")
        with loaded as npz:
            values = {name: npz[name] for name in npz.files}
    except PredictionsRefused:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise PredictionsRefused(f"{where} cannot be read as a .npz file: {exc}") from exc
    missing = [name for name in HEADER if name not in values]
    if missing:
        raise PredictionsRefused(f"{where} lacks {', '.join(missing)}")
    unknown = sorted(set(values) - set(HEADER) - set(PREDICTIONS))
    if unknown:
        raise PredictionsRefused(
            f"{where} holds unknown fields {', '.join(unknown)}; the format has "
            f"{', '.join(HEADER + PREDICTIONS)}"
        )
    found = _scalar(values, "format", "U", where)
    if found != FORMAT:
        raise PredictionsRefused(f"{where} is format {found!r}; this evaluator reads {FORMAT!r}")
    digest = str(_scalar(values, "test_set_digest", "U", where))
    step = int(_scalar(values, "step", "iu", where))  # type: ignore[call-overload]
    epoch = float(_scalar(values, "epoch", "iuf", where))  # type: ignore[arg-type]
    elapsed = float(_scalar(values, "elapsed", "iuf", where))  # type: ignore[arg-type]
    if step < 0 or not (math.isfinite(epoch) and epoch >= 0):
        raise PredictionsRefused(f"{where}: step {step} and epoch {epoch} must not be negative")
    if not (math.isfinite(elapsed) and elapsed >= 0):
        raise PredictionsRefused(
            f"{where}: elapsed {elapsed} must be seconds on the benchmark clock (0 or more)"
        )
    arrays = {name: values[name] for name in PREDICTIONS if name in values}
    if not arrays:
        raise PredictionsRefused(f"{where} holds no predictions ({', '.join(PREDICTIONS)})")
    return Predictions(digest, step, epoch, elapsed, arrays, where)


def files_in(folder: str | Path) -> list[Path]:
    """A run's prediction files in `folder`, in step order (temporary files left out)."""
    return sorted(Path(folder).glob(f"{PREFIX}*{SUFFIX}"))
