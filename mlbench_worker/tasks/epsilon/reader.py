"""The epsilon data set as the LIBSVM collection publishes it: find, download, cache, shard.

epsilon comes from the PASCAL Large Scale Learning Challenge (2008): 400,000 training and
100,000 test rows of 2,000 dense features, every row scaled to unit L2 norm, labels -1/+1.
LIBSVM's collection serves it as ``epsilon_normalized`` and ``epsilon_normalized.t``, bzip2
compressed (about 12 GB of text uncompressed).

Where the files are looked for under the data directory, in order: a valid cache
(``epsilon-npy/``), ``epsilon_normalized[.t]`` as plain text, the same with ``.bz2``, then a
download of the ``.bz2`` files (SHA-256 checked; ``MLBENCH_EPSILON_URL`` may name a mirror).
Any number of rows is accepted; the feature count must be 2,000.

The text is converted once into ``epsilon-npy/{train,test}_x.npy`` (rows x 2,000 float32, a
memory-mappable .npy), ``..._y.npy`` (-1/+1 float32) and ``{train,test}.json`` (the source
file's name, size and modification time, rows, features). Files are written under temporary
names and renamed; the JSON comes last, so its presence means the arrays are complete. A cache
whose source file changed (size or time) is rebuilt; one whose source was deleted afterwards
is still used, so the 12 GB of text need not be kept. A lock file serialises ranks (and runs)
that share the directory, so one converts and the others find its cache.

`read_rows` gives one rank its rows without holding the whole set: it maps the .npy, copies the
wanted rows block by block, and tells the kernel after each block that the mapped pages are no
longer needed (MADV_DONTNEED), so the rank's resident memory is its rows plus one block.
"""

from __future__ import annotations

import json
import mmap
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from mlbench_worker.data import DataUnavailable, FolderLock, libsvm
from mlbench_worker.data import download as download_file
from mlbench_worker.shared import data_files
from mlbench_worker.training.errors import WorkerError

TRAIN, TEST = "train", "test"
SPLITS = (TRAIN, TEST)
FILES = {TRAIN: data_files.EPSILON_FILES[TRAIN], TEST: data_files.EPSILON_FILES[TEST]}
URL_BASE = "https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary/"
SHA256 = data_files.EPSILON_SHA256  # of the .bz2 files (where they come from: data_files)
FEATURES = 2000
OFFICIAL_ROWS = {TRAIN: 400_000, TEST: 100_000}
CACHE = "epsilon-npy"
CACHE_FORMAT = 1
BLOCK_ROWS = 2048  # rows mapped at a time by read_rows (16 MB of epsilon)
PROGRESS_SECONDS = 15.0


@dataclass
class SplitInfo:
    """One split's cache as its JSON describes it."""

    rows: int
    features: int
    source: str | None  # file name under the data directory; None when generated
    size: int | None
    mtime_ns: int | None
    labels: str  # the source's label convention: "+-1" or "0/1"
    seconds: float  # how long the conversion took
    format: int = CACHE_FORMAT


def hand_placement_help(data_dir: Path) -> str:
    """How to put the data in place without network access (part of every failure message)."""
    names = " and ".join(f"{URL_BASE}{FILES[s]}.bz2" for s in SPLITS)
    return (
        f"To place it by hand, download {names} on a machine with access and copy them to "
        f"{data_dir} (compressed or not, under those names); or use --dataset synthetic."
    )


def cache_dir(data_dir: Path) -> Path:
    return Path(data_dir) / CACHE


def sources(data_dir: Path, split: str) -> list[Path]:
    """The split's text files present in the data directory, plain text first."""
    name = FILES[split]
    return [p for p in (data_dir / name, data_dir / f"{name}.bz2") if p.is_file()]


def read_info(data_dir: Path, split: str) -> SplitInfo | None:
    """The split's cache description, or None when there is no complete cache."""
    path = cache_dir(data_dir) / f"{split}.json"
    try:
        info = SplitInfo(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return info if info.format == CACHE_FORMAT else None


def valid_cache(data_dir: Path, split: str, features: int) -> SplitInfo | None:
    """The cache if it may be used: complete, right width, made from the files present."""
    info = read_info(data_dir, split)
    if info is None or info.features != features:
        return None
    present = sources(data_dir, split)
    if info.source is not None:
        src = data_dir / info.source
        if src.is_file():
            stat = src.stat()
            return info if (stat.st_size, stat.st_mtime_ns) == (info.size, info.mtime_ns) else None
    # Its source is gone (deleted after conversion, or a generated set): fine, unless a
    # different file now stands in its place.
    return None if present else info


def prepare(
    data_dir: str | Path,
    *,
    features: int = FEATURES,
    allow_download: bool = True,
    url_base: str | None = None,
    checksums: dict[str, str] | None = None,
    say: Callable[[str], None] = print,
) -> dict[str, SplitInfo]:
    """Make sure both splits are cached (download and convert what is missing).

    Raises DataUnavailable when a split has no files and cannot be downloaded, LibsvmError
    (naming file and line) for a damaged or wrong file, WorkerError for a bad download.
    """
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    found: dict[str, SplitInfo] = {}
    with FolderLock(data_dir / ".epsilon.lock"):
        for split in SPLITS:
            info = valid_cache(data_dir, split, features)
            if info is None:
                present = sources(data_dir, split)
                if present:
                    src = present[0]
                elif allow_download:
                    name = f"{FILES[split]}.bz2"
                    src = download(data_dir, name, url_base, checksums, say)
                else:
                    raise DataUnavailable(
                        f"epsilon ({FILES[split]}) is not in {data_dir}. "
                        f"{hand_placement_help(data_dir)}"
                    )
                info = convert(src, data_dir, split, features, say)
            found[split] = info
    return found


def download(
    data_dir: Path,
    name: str,
    url_base: str | None = None,
    checksums: dict[str, str] | None = None,
    say: Callable[[str], None] = print,
    timeout: float = 30.0,
) -> Path:
    """Fetch `name` into data_dir via a .part file, checking its SHA-256 on the way."""
    base = url_base or os.environ.get("MLBENCH_EPSILON_URL") or URL_BASE
    url = base.rstrip("/") + "/" + name
    expected = (SHA256 if checksums is None else checksums).get(name)
    try:
        return download_file.fetch(
            url,
            data_dir / name,
            timeout=timeout,
            digest=("sha256", expected) if expected is not None else None,
            say=lambda message: say(f"epsilon: {message}"),
        )
    except download_file.DownloadFailed as exc:
        raise DataUnavailable(
            f"Could not download epsilon from {exc}. {hand_placement_help(data_dir)}"
        ) from exc
    except download_file.WrongDigest as exc:
        raise WorkerError(f"{exc}. Run again to fetch a fresh copy.", exit_code=1) from exc


class CacheWriter:
    """Writes one split's cache: rows appended to a .npy whose header is completed at the end.

    numpy leaves room in a .npy header for the row count to grow, so the header is written
    for 0 rows first and rewritten in place once the count is known: one pass, no copy.
    """

    def __init__(self, data_dir: Path, split: str, features: int) -> None:
        self.dir = cache_dir(data_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.split = split
        self.features = features
        (self.dir / f"{split}.json").unlink(missing_ok=True)  # incomplete from here on
        self.tmp_x = self.dir / f".{split}_x.npy.tmp{os.getpid()}"
        self.tmp_y = self.dir / f".{split}_y.tmp{os.getpid()}.npy"
        self.fh = open(self.tmp_x, "wb")  # noqa: SIM115 - closed in commit/abort
        self._header(0)
        self.header_len = self.fh.tell()
        self.rows = 0
        self.labels: list[np.ndarray] = []
        self.started = time.monotonic()

    def _header(self, rows: int) -> None:
        np.lib.format.write_array_header_1_0(
            self.fh,
            {"descr": "<f4", "fortran_order": False, "shape": (rows, self.features)},
        )

    def append(self, x: np.ndarray, y: np.ndarray) -> None:
        if x.ndim != 2 or x.shape[1] != self.features or len(x) != len(y):
            raise ValueError(f"rows must be N x {self.features} with N labels, got {x.shape}")
        self.fh.write(np.ascontiguousarray(x, dtype="<f4").tobytes())
        self.labels.append(np.asarray(y, dtype=np.float32))
        self.rows += len(x)

    def commit(self, source: Path | None, labels: str = "+-1") -> SplitInfo:
        """Finish the files and publish them (the JSON last)."""
        self.fh.seek(0)
        self._header(self.rows)
        if self.fh.tell() != self.header_len:  # numpy's spare room should make this impossible
            raise RuntimeError("the .npy header changed size; cannot finish the cache in place")
        self.fh.close()
        y = np.concatenate(self.labels) if self.labels else np.zeros(0, np.float32)
        np.save(self.tmp_y, y)
        os.replace(self.tmp_x, self.dir / f"{self.split}_x.npy")
        os.replace(self.tmp_y, self.dir / f"{self.split}_y.npy")
        stat = source.stat() if source is not None else None
        info = SplitInfo(
            rows=self.rows,
            features=self.features,
            source=source.name if source is not None else None,
            size=stat.st_size if stat else None,
            mtime_ns=stat.st_mtime_ns if stat else None,
            labels=labels,
            seconds=round(time.monotonic() - self.started, 3),
        )
        tmp_json = self.dir / f".{self.split}.json.tmp{os.getpid()}"
        tmp_json.write_text(json.dumps(asdict(info), indent=1))
        os.replace(tmp_json, self.dir / f"{self.split}.json")
        return info

    def abort(self) -> None:
        self.fh.close()
        self.tmp_x.unlink(missing_ok=True)
        self.tmp_y.unlink(missing_ok=True)


def convert(
    src: Path,
    data_dir: Path,
    split: str,
    features: int = FEATURES,
    say: Callable[[str], None] = print,
) -> SplitInfo:
    """Parse a LIBSVM file (plain or .bz2) into the split's cache; the file's stat is recorded
    as it was before reading, so a file replaced meanwhile makes the cache stale, not wrong."""
    stat_before = src.stat()
    say(f"epsilon: converting {src} to {cache_dir(data_dir)} (once; later runs read the cache)")
    writer = CacheWriter(data_dir, split, features)
    check = libsvm.LabelCheck(src)
    last_said = time.monotonic()
    max_index = 0
    try:
        for chunk in libsvm.read_chunks(src, features):
            check.add(chunk)
            writer.append(chunk.x, chunk.y)
            max_index = max(max_index, chunk.max_index)
            if time.monotonic() - last_said >= PROGRESS_SECONDS:
                last_said = time.monotonic()
                say(f"epsilon: {src.name}: {writer.rows:,} rows so far")
        libsvm.check_feature_count(src, max_index, features)
        convention = check.convention()
        writer.labels = [libsvm.to_plus_minus(y, convention) for y in writer.labels]
        if src.stat().st_mtime_ns != stat_before.st_mtime_ns:
            raise WorkerError(f"{src} changed while it was being read; run again", exit_code=1)
        info = writer.commit(src, convention)
    except BaseException:
        writer.abort()
        raise
    say(f"epsilon: {src.name}: {info.rows:,} rows x {features:,} features in {info.seconds:.1f} s")
    return info


def read_rows(
    data_dir: str | Path, split: str, indices: np.ndarray, block_rows: int = BLOCK_ROWS
) -> tuple[np.ndarray, np.ndarray]:
    """Rows `indices` (sorted, unique) of a cached split as float32 arrays (x, y -1/+1)."""
    data_dir = Path(data_dir)
    info = read_info(data_dir, split)
    if info is None:
        raise DataUnavailable(f"the epsilon cache for {split} in {cache_dir(data_dir)} is missing")
    indices = np.asarray(indices, dtype=np.int64)
    if indices.size and (np.any(np.diff(indices) <= 0) or indices[0] < 0):
        raise ValueError("indices must be sorted and unique")
    if indices.size and indices[-1] >= info.rows:
        raise ValueError(f"row {indices[-1]} is past the end ({info.rows} rows)")
    d = info.features
    out = np.empty((indices.size, d), dtype=np.float32)
    path = cache_dir(data_dir) / f"{split}_x.npy"
    with open(path, "rb") as fh:
        version = np.lib.format.read_magic(fh)
        read_header = (
            np.lib.format.read_array_header_1_0
            if version == (1, 0)
            else np.lib.format.read_array_header_2_0
        )
        shape, fortran, dtype = read_header(fh)
        if shape != (info.rows, d) or fortran or dtype != np.dtype("<f4"):
            raise WorkerError(
                f"{path} does not match its description ({shape} {dtype}); delete "
                f"{cache_dir(data_dir)} and run again",
                exit_code=1,
            )
        offset = fh.tell()
        if indices.size:
            _copy_rows(fh, offset, info.rows, d, indices, out, block_rows)
    y = np.load(cache_dir(data_dir) / f"{split}_y.npy")
    return out, np.ascontiguousarray(y[indices])


def _copy_rows(
    fh: object,
    offset: int,
    rows: int,
    d: int,
    indices: np.ndarray,
    out: np.ndarray,
    block_rows: int,
) -> None:
    mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)  # type: ignore[attr-defined]
    try:
        array = np.frombuffer(mm, dtype="<f4", count=rows * d, offset=offset).reshape(rows, d)
        row_bytes = d * 4
        pos = 0
        while pos < indices.size:
            start = int(indices[pos]) // block_rows * block_rows
            stop = min(rows, start + block_rows)
            end = int(np.searchsorted(indices, stop, side="left"))
            out[pos:end] = array[indices[pos:end]]
            pos = end
            _release(mm, offset + start * row_bytes, offset + stop * row_bytes)
        del array
    finally:
        mm.close()


def _release(mm: mmap.mmap, begin: int, end: int) -> None:
    """Drop this process's mapping of file bytes [begin, end): the pages stay in the page
    cache for other readers, but stop counting in our resident memory."""
    if not hasattr(mm, "madvise") or not hasattr(mmap, "MADV_DONTNEED"):
        return
    page = mmap.PAGESIZE
    first = begin // page * page
    last = min(len(mm), -(-end // page) * page)
    if last > first:
        mm.madvise(mmap.MADV_DONTNEED, first, last - first)
