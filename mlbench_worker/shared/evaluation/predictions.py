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
- for task 2: ``predicted_label``, N integers, -1 or +1;
- for a translation task (4b): ``predicted_text``, the UTF-8 bytes (uint8) of N lines joined
  by "\n", each a hypothesis's SentencePiece pieces (text_predictions.py), and the digest
  is that of the references' lines (``digest_of_text``).

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

`read` takes any bytes (the master reads what a client posted): it opens the zip and each
member itself rather than through np.load, whose errors on damaged bytes are zlib's, the
tokenizer's or the zip module's, not a ValueError. Each .npy header is checked (magic,
version, balanced brackets, a literal dictionary of descr, fortran_order and shape, no
Python objects) and the data it declares must be exactly what the member holds before any
of it is read; damaged compressed data, a truncated member or a CRC that does not match is
a refusal naming the member (tests/api/test_upload_fuzz.py feeds it a seeded corpus).
"""

from __future__ import annotations

import ast
import hashlib
import math
import os
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from mlbench_worker.shared.evaluation.text_predictions import (
    TEXT,
    TextRefused,
    decode,
    encode,
)
from mlbench_worker.shared.evaluation.text_predictions import (  # the text task's digest
    digest_of_text as digest_of_text,
)

FORMAT = "mlbench-predictions-1"
CLASS, TOP5, LABEL = "predicted_class", "predicted_top5", "predicted_label"
HEADER = ("format", "test_set_digest", "step", "epoch", "elapsed")
PREDICTIONS = (CLASS, TOP5, LABEL, TEXT)
PREFIX, SUFFIX = "predictions-step", ".npz"
MAX_STEP = 10**10 - 1  # the file's name holds the step in 10 digits, so names sort by step
MAGIC = b"\x93NUMPY"  # how a .npy array begins
MAX_HEADER = 10_000  # bytes of a .npy header read at most (numpy's own limit)
UNREADABLE = "cannot be read as a .npz file"
_CLOSES = {")": "(", "]": "[", "}": "{"}


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
    text: tuple[str, ...] | None = None  # predicted_text's lines, decoded and checked


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
    predicted_text: list[str] | None = None,
) -> Path:
    """Write one evaluation's file into `folder` (under a temporary name, then renamed, so a
    reader never sees half a file); returns its path."""
    given = {CLASS: predicted_class, TOP5: predicted_top5, LABEL: predicted_label}
    arrays = {name: np.asarray(a) for name, a in given.items() if a is not None}
    if predicted_text is not None:
        try:
            arrays[TEXT] = encode(predicted_text)
        except TextRefused as exc:
            raise PredictionsRefused(str(exc)) from None
    if not arrays:
        raise PredictionsRefused(f"nothing to write: give one of {', '.join(PREDICTIONS)}")
    for name, array in arrays.items():
        if (
            name != TEXT and array.dtype.kind not in "iu"
        ):  # refused here already, not only when graded
            raise PredictionsRefused(f"{name} is {array.dtype}; the format holds integers")
    if not 0 <= int(step) <= MAX_STEP:
        raise PredictionsRefused(f"step {step} is not a step of 0 to {MAX_STEP}")
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


def _arrays(path: Path, where: str) -> dict[str, np.ndarray]:
    """Every array of the .npz at `path`, by field name. Whatever the bytes, the only error
    is PredictionsRefused naming the member and what is wrong with it (damaged compressed
    data, a truncated member, an unbalanced .npy header, a header declaring more bytes than
    the member holds, Python objects, ...): numpy's own reader lets zlib's, the tokenizer's
    and the zip module's errors through, so each member is read here, its header checked
    before any of its data is."""
    try:
        archive = zipfile.ZipFile(path)
    except Exception as exc:  # BadZipFile, NotImplementedError (a zip version), OSError...
        if _begins_with_magic(path):
            raise PredictionsRefused(f"{where} is a single .npy array, not a .npz file") from None
        if isinstance(exc, OSError):  # the file itself (a path that is not there)
            raise PredictionsRefused(f"{where} {UNREADABLE}: {exc}") from None
        why = str(exc) if isinstance(exc, zipfile.BadZipFile) else f"{type(exc).__name__}: {exc}"
        raise PredictionsRefused(f"{where} {UNREADABLE}: it is no zip archive ({why})") from None
    values: dict[str, np.ndarray] = {}
    with archive:
        for info in archive.infolist():
            name = info.filename
            said = f"{where} {UNREADABLE}: member {name[:80]!r}"
            if not name.endswith(".npy"):
                raise PredictionsRefused(
                    f"{said} is no .npy array (a .npz holds one <field>.npy per field)"
                )
            if name[:-4] in values:
                raise PredictionsRefused(f"{said} is in the file twice")
            values[name[:-4]] = _member(archive, info, said)
    return values


def _begins_with_magic(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def _member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, said: str) -> np.ndarray:
    """The array of one member, its header checked before its data is read."""
    if info.flag_bits & 0x1:
        raise PredictionsRefused(f"{said} is encrypted")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise PredictionsRefused(
            f"{said} is compressed with method {info.compress_type}; a .npz's members are "
            "stored or deflated (np.savez, np.savez_compressed)"
        )
    try:
        with archive.open(info) as fh:
            dtype, shape, fortran, header_bytes = _npy_header(fh, said)
            count = math.prod(shape)
            wanted = count * dtype.itemsize
            held = info.file_size - header_bytes
            if wanted != held:
                raise PredictionsRefused(
                    f"{said}: its header declares {wanted} bytes of data ({dtype} of shape "
                    f"{shape}), and the member holds {held}"
                )
            data = fh.read(wanted + 1)  # to its end: the zip module then checks its CRC
            if len(data) != wanted:
                raise PredictionsRefused(
                    f"{said} is truncated: {len(data)} of the {wanted} bytes it declares"
                )
            array = np.frombuffer(bytearray(data), dtype=dtype, count=count)
            return array.reshape(shape, order="F" if fortran else "C")
    except PredictionsRefused:
        raise
    except Exception as exc:
        raise PredictionsRefused(f"{said} {_damage(exc)}") from None


def _damage(exc: Exception) -> str:
    """What an error met while reading a member says of its bytes."""
    if isinstance(exc, zlib.error):
        return f"holds damaged compressed data ({exc})"
    if isinstance(exc, EOFError):
        return f"is truncated: its data ends before the size it declares ({exc})"
    if isinstance(exc, zipfile.BadZipFile):
        return f"is damaged ({exc})"
    if isinstance(exc, MemoryError):
        return "declares more data than can be read"
    return f"cannot be read ({type(exc).__name__}: {exc})"


def _npy_header(fh: IO[bytes], said: str) -> tuple[np.dtype, tuple[int, ...], bool, int]:
    """A .npy member's dtype, shape and order, read from its header, and the header's
    length in bytes; PredictionsRefused saying what is wrong with it."""
    magic = fh.read(len(MAGIC) + 2)
    if len(magic) < len(MAGIC) + 2 or not magic.startswith(MAGIC):
        raise PredictionsRefused(f"{said} is no .npy array (it does not begin with {MAGIC!r})")
    version = (magic[-2], magic[-1])
    if version not in ((1, 0), (2, 0), (3, 0)):
        raise PredictionsRefused(
            f"{said} is .npy format version {version[0]}.{version[1]}; versions 1.0 to 3.0 are read"
        )
    width = 2 if version[0] == 1 else 4
    raw = fh.read(width)
    size = int.from_bytes(raw, "little")
    if len(raw) < width or size > MAX_HEADER:
        found = f"declares a header of {size} bytes" if len(raw) == width else "ends there"
        raise PredictionsRefused(
            f"{said}: its .npy header {found}; at most {MAX_HEADER} bytes are read"
        )
    body = fh.read(size)
    if len(body) < size:
        raise PredictionsRefused(
            f"{said} is truncated inside its .npy header ({len(body)} of {size} bytes)"
        )
    try:
        text = body.decode("utf-8" if version[0] == 3 else "latin-1")
    except UnicodeDecodeError:
        raise PredictionsRefused(f"{said}: its .npy header is not UTF-8 text") from None
    _balanced(text, said)
    try:
        header = ast.literal_eval(text)
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError) as exc:
        raise PredictionsRefused(
            f"{said}: its .npy header is not a Python literal ({type(exc).__name__}): "
            f"{text.strip()[:80]!r}"
        ) from None
    if not isinstance(header, dict) or set(header) != {"descr", "fortran_order", "shape"}:
        raise PredictionsRefused(
            f"{said}: its .npy header is not a dictionary of descr, fortran_order and shape: "
            f"{text.strip()[:80]!r}"
        )
    shape, fortran = header["shape"], header["fortran_order"]
    if not isinstance(shape, tuple) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape
    ):
        raise PredictionsRefused(f"{said}: its .npy header's shape {shape!r:.80} is no shape")
    if not isinstance(fortran, bool):
        raise PredictionsRefused(f"{said}: its .npy header's fortran_order is not True or False")
    try:
        dtype = np.lib.format.descr_to_dtype(header["descr"])
    except Exception as exc:
        raise PredictionsRefused(
            f"{said}: its .npy header's descr {header['descr']!r:.80} is no dtype "
            f"({type(exc).__name__})"
        ) from None
    if dtype.hasobject:
        raise PredictionsRefused(
            f"{said} holds Python objects (dtype {dtype}), which are never unpickled; the "
            "format holds numbers and text"
        )
    if dtype.itemsize == 0:
        raise PredictionsRefused(f"{said} has dtype {dtype}, of no size")
    return dtype, shape, fortran, len(magic) + width + size


def _balanced(text: str, said: str) -> None:
    """PredictionsRefused when the brackets or quotes of a .npy header do not pair up."""
    opened: list[str] = []
    quote = ""
    escaped = False
    for char in text:
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char in "([{":
            opened.append(char)
        elif char in _CLOSES and (not opened or opened.pop() != _CLOSES[char]):
            raise PredictionsRefused(
                f"{said}: its .npy header is unbalanced ({char!r} closes no bracket it "
                f"opened): {text.strip()[:80]!r}"
            )
    if quote or opened:
        what = f"a quote {quote}" if quote else f"{opened[-1]!r}"
        raise PredictionsRefused(
            f"{said}: its .npy header is unbalanced ({what} is never closed): {text.strip()[:80]!r}"
        )


def read(path: str | Path) -> Predictions:
    """The predictions in `path`; PredictionsRefused naming the problem when the file is not
    in the format (not a .npz, a member damaged or not a plain .npy array, a field missing or
    unknown, a header value of the wrong type)."""
    path = Path(path)
    where = str(path)
    values = _arrays(path, where)
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
    if step > MAX_STEP:
        raise PredictionsRefused(
            f"{where}: step {step} has more than the 10 digits of a predictions file's name"
        )
    if step < 0 or not (math.isfinite(epoch) and epoch >= 0):
        raise PredictionsRefused(f"{where}: step {step} and epoch {epoch} must not be negative")
    if not (math.isfinite(elapsed) and elapsed >= 0):
        raise PredictionsRefused(
            f"{where}: elapsed {elapsed} must be seconds on the benchmark clock (0 or more)"
        )
    arrays = {name: values[name] for name in PREDICTIONS if name in values}
    if not arrays:
        raise PredictionsRefused(f"{where} holds no predictions ({', '.join(PREDICTIONS)})")
    text = None
    if TEXT in arrays:
        try:
            text = decode(arrays[TEXT], where)
        except TextRefused as exc:
            raise PredictionsRefused(str(exc)) from None
    return Predictions(digest, step, epoch, elapsed, arrays, where, text)


def files_in(folder: str | Path) -> list[Path]:
    """A run's prediction files in `folder`, in step order (temporary files left out)."""
    return sorted(Path(folder).glob(f"{PREFIX}*{SUFFIX}"))
