"""LIBSVM text files (``label index:value ...``) read in chunks into dense float32 rows.

The parsing is scikit-learn's C reader (`load_svmlight_file`): it takes sparse or dense
lines, 1-based indices, comments and ``qid:`` fields, and is fast enough (about 70 MB/s of
text here) for the 12 GB epsilon file. It reads whole chunks of lines at a time, so a large
file never has to fit in memory; `.bz2` files are decompressed on the fly by a helper thread
while the main thread parses the previous chunk.

What scikit-learn does not do, done here: an error names the file and the line (scikit-learn
only says what was wrong, so the failing chunk is re-read line by line to find it); values
must be finite; indices must not exceed the expected feature count, and the largest index in
the file must equal it (a file with fewer features is the wrong file); labels must be -1/+1
or 0/1, never a mix, and come back as -1/+1.
"""

from __future__ import annotations

import bz2
import contextlib
import io
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlbench_worker.training.errors import WorkerError

CHUNK_BYTES = 16 << 20  # text parsed per call: ~500 epsilon rows, ~4 MB of dense floats


class LibsvmError(WorkerError):
    """A LIBSVM file that cannot be used; the message names the file and, where known, the line."""

    def __init__(self, message: str) -> None:
        super().__init__(message, exit_code=1)


@dataclass
class Chunk:
    """Consecutive rows of a file: dense features, labels as written, first row's line number."""

    x: np.ndarray  # rows x n_features float32
    y: np.ndarray  # rows, float32, as in the file (normalised by `LabelCheck`)
    first_line: int  # 1-based line number of the chunk's first line (comments included)
    lines: list[bytes]  # the chunk's raw lines, for error messages
    max_index: int  # the largest 1-based feature index written in the chunk (0 if none)


def read_chunks(
    path: Path,
    n_features: int,
    chunk_bytes: int = CHUNK_BYTES,
    progress: Callable[[int], None] | None = None,
) -> Iterator[Chunk]:
    """Chunks of dense rows in file order; LibsvmError naming file and line for bad input.

    `progress` is called with the number of compressed (or plain) bytes consumed so far.
    """
    from sklearn.datasets import load_svmlight_file

    with open(path, "rb") as raw:
        text = bz2.open(raw, "rb") if path.name.endswith(".bz2") else raw
        line_no = 1
        # closing() stops the reading thread before the file is closed, however we leave.
        with contextlib.closing(_prefetch(_line_chunks(path, text, chunk_bytes))) as chunks:
            for lines in chunks:
                if progress is not None:
                    progress(raw.tell())
                try:
                    x, y = load_svmlight_file(
                        io.BytesIO(b"".join(lines)),
                        n_features=n_features,
                        dtype=np.float32,
                        zero_based=False,
                    )
                except ValueError as exc:
                    raise _locate(path, lines, line_no, n_features, str(exc)) from None
                dense = x.toarray()
                if not np.isfinite(dense).all():
                    row = int(np.flatnonzero(~np.isfinite(dense).all(axis=1))[0])
                    raise _row_error(path, lines, line_no, row, "a value is not a finite number")
                max_index = int(x.indices.max()) + 1 if x.nnz else 0
                yield Chunk(dense, y.astype(np.float32), line_no, lines, max_index)
                line_no += len(lines)


def _line_chunks(path: Path, text: io.BufferedIOBase, chunk_bytes: int) -> Iterator[list[bytes]]:
    try:
        while True:
            lines = text.readlines(chunk_bytes)
            if not lines:
                return
            yield lines
    except (OSError, EOFError) as exc:  # e.g. a truncated or damaged .bz2 file
        raise LibsvmError(f"{path} cannot be read ({exc}); delete it and fetch it again") from exc


def _prefetch(items: Iterable, depth: int = 2) -> Iterator:
    """Produce `items` in a helper thread (bz2 decompression releases the GIL) while the
    consumer works on the previous one."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    done = object()
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put(item):
                    return
            put(done)
        except BaseException as exc:  # handed to the consumer, raised there
            put(exc)

    thread = threading.Thread(target=produce, name="libsvm-reader", daemon=True)
    thread.start()
    try:
        while True:
            item = q.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join()


def _is_data_line(line: bytes) -> bool:
    return bool(line.split(b"#", 1)[0].strip())


def _row_error(path: Path, lines: list[bytes], first_line: int, row: int, why: str) -> LibsvmError:
    """The error for data row `row` of a chunk (comments and blank lines do not count as rows)."""
    seen = -1
    for i, line in enumerate(lines):
        if _is_data_line(line):
            seen += 1
            if seen == row:
                return _line_error(path, first_line + i, line, why)
    return LibsvmError(f"{path}: {why}")


def _line_error(path: Path, line_no: int, line: bytes, why: str) -> LibsvmError:
    text = line.decode("utf-8", "replace").rstrip("\r\n")
    shown = text if len(text) <= 80 else text[:77] + "..."
    return LibsvmError(f"{path}, line {line_no}: {why}: {shown!r}")


def _locate(
    path: Path, lines: list[bytes], first_line: int, n_features: int, message: str
) -> LibsvmError:
    """scikit-learn rejected a chunk: parse its lines one by one to name the bad one."""
    from sklearn.datasets import load_svmlight_file

    for i, line in enumerate(lines):
        if not _is_data_line(line):
            continue
        try:
            load_svmlight_file(
                io.BytesIO(line), n_features=n_features, dtype=np.float32, zero_based=False
            )
        except ValueError as exc:
            why = str(exc)
            if "n_features was set" in why:
                why = (
                    f"a feature index is larger than {n_features:,} (the data set's feature count)"
                )
            elif "sorted and unique" in why:
                why = "feature indices must be increasing and unique"
            elif "Invalid index" in why:
                why = f"{why.split(' in ')[0]} (indices start at 1)"
            return _line_error(path, first_line + i, line, f"malformed line ({why})")
    return LibsvmError(f"{path}, lines {first_line}-{first_line + len(lines) - 1}: {message}")


class LabelCheck:
    """Collects what labels a file uses and maps them to -1/+1 at the end.

    A chunk alone cannot tell 0/1 files from -1/+1 files (a chunk may hold only 1s), so the
    mapping is decided once the whole file has been seen.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.first_line: dict[float, int] = {}  # label value -> first line it appears on

    def add(self, chunk: Chunk) -> None:
        bad = ~np.isin(chunk.y, (-1.0, 0.0, 1.0))
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise _row_error(
                self.path,
                chunk.lines,
                chunk.first_line,
                row,
                f"label {chunk.y[row]:g} is not -1/+1 or 0/1 (binary classification)",
            )
        for value in (-1.0, 0.0):
            if value not in self.first_line and (chunk.y == value).any():
                row = int(np.flatnonzero(chunk.y == value)[0])
                self.first_line[value] = _data_line_number(chunk, row)

    def convention(self) -> str:
        """ "+-1" or "0/1"; LibsvmError when the file mixes -1 and 0."""
        if -1.0 in self.first_line and 0.0 in self.first_line:
            raise LibsvmError(
                f"{self.path} mixes labels -1 (first on line {self.first_line[-1.0]}) and 0 "
                f"(first on line {self.first_line[0.0]}): use -1/+1 or 0/1, not both"
            )
        return "0/1" if 0.0 in self.first_line else "+-1"


def _data_line_number(chunk: Chunk, row: int) -> int:
    seen = -1
    for i, line in enumerate(chunk.lines):
        if _is_data_line(line):
            seen += 1
            if seen == row:
                return chunk.first_line + i
    return chunk.first_line


def to_plus_minus(y: np.ndarray, convention: str) -> np.ndarray:
    """Labels as -1/+1 float32 (0 becomes -1 in a 0/1 file)."""
    y = np.asarray(y, dtype=np.float32)
    return np.where(y > 0, 1.0, -1.0).astype(np.float32) if convention == "0/1" else y


def read(path: Path, n_features: int) -> tuple[np.ndarray, np.ndarray]:
    """A whole (small) file as dense float32 rows and -1/+1 labels: for tests and tools."""
    check = LabelCheck(path)
    xs, ys = [], []
    max_index = 0
    for chunk in read_chunks(path, n_features):
        check.add(chunk)
        xs.append(chunk.x)
        ys.append(chunk.y)
        max_index = max(max_index, chunk.max_index)
    check_feature_count(path, max_index, n_features)
    x = np.concatenate(xs) if xs else np.zeros((0, n_features), np.float32)
    y = np.concatenate(ys) if ys else np.zeros(0, np.float32)
    return x, to_plus_minus(y, check.convention())


def check_feature_count(path: Path, max_index: int, n_features: int) -> None:
    """Every index was <= n_features (checked while parsing); the largest must equal it."""
    if max_index != n_features:
        raise LibsvmError(
            f"{path} has {max_index:,} features (its largest feature index), "
            f"expected {n_features:,}: it is not the expected data set"
        )
