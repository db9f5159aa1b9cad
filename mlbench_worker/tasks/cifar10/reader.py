"""CIFAR-10 from its official python archive: download, verify, parse, cache.

The archive holds pickled dicts (`data`: uint8 N x 3072, rows of 1024 red, 1024 green,
1024 blue values; `labels`: N ints) in data_batch_1..5, test_batch and batches.meta. We read
them with a restricted unpickler that only builds numpy arrays and plain containers, so a
tampered file cannot run code, and we check every MD5 first (names, checksums and the
unpickler are the evaluator's too: mlbench_worker/shared/data_files.py). The parsed arrays
are cached as .npy files (N x 3 x 32 x 32 uint8) so later runs start in a fraction of a
second.

Where the files are looked for, in order: the .npy cache, an extracted
`cifar-10-batches-py/` folder, the archive `cifar-10-python.tar.gz`, then a download.
"""

from __future__ import annotations

import os
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlbench_worker.data import DataUnavailable, FolderLock
from mlbench_worker.data import download as download_file
from mlbench_worker.shared import data_files
from mlbench_worker.training.errors import WorkerError

URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
ARCHIVE = data_files.CIFAR10_ARCHIVE
ARCHIVE_MD5 = data_files.CIFAR10_ARCHIVE_MD5
FOLDER = data_files.CIFAR10_FOLDER
TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILES = (data_files.CIFAR10_TEST_FILE,)
META_FILE = "batches.meta"
FILE_MD5 = data_files.CIFAR10_FILE_MD5
CACHE = "cifar10-npy"
CACHE_FILES = ("train_x.npy", "train_y.npy", "test_x.npy", "test_y.npy")


@dataclass
class Arrays:
    """A data set in memory: images N x 3 x 32 x 32 uint8, labels N int64."""

    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    classes: list[str]


def hand_placement_help(data_dir: Path) -> str:
    """How to put the data in place without network access (part of every failure message)."""
    return (
        f"To place it by hand, download {URL} (MD5 {ARCHIVE_MD5}) on a machine with access "
        f"and copy it to {data_dir / ARCHIVE} (or extract it so that "
        f"{data_dir / FOLDER / 'data_batch_1'} exists); or use --dataset synthetic."
    )


def md5sum(path: Path) -> str:
    return data_files.file_digest(path, "md5")


def read_batch(path: Path) -> dict:
    """One pickled batch file as a dict with str keys; WorkerError naming the file if corrupt."""
    try:
        with open(path, "rb") as fh:
            return data_files.unpickle_batch(fh)
    except Exception as exc:  # any parse failure means the same thing to the user
        raise WorkerError(
            f"CIFAR-10 file {path} is corrupt ({exc}). Delete {path.parent} and "
            f"{path.parent.parent / ARCHIVE} and run again to fetch a fresh copy.",
            exit_code=1,
        ) from exc


def parse_images(batch: dict, path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Images (N x 3 x 32 x 32 uint8) and labels (N int64) of one parsed batch file."""
    try:
        data = np.asarray(batch["data"])
        labels = np.asarray(batch["labels"], dtype=np.int64)
        if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
            raise ValueError(f"'data' is {data.dtype} {data.shape}, expected uint8 N x 3072")
        if labels.shape != (data.shape[0],):
            raise ValueError(f"{labels.size} labels for {data.shape[0]} images")
        if labels.size and (labels.min() < 0 or labels.max() > 9):
            raise ValueError("labels outside 0..9")
    except (KeyError, ValueError, TypeError) as exc:
        raise WorkerError(
            f"CIFAR-10 file {path} is corrupt ({exc}). Delete it and run again.", exit_code=1
        ) from exc
    return data.reshape(-1, 3, 32, 32), labels


def parse_folder(folder: Path, file_md5: dict[str, str] | None = FILE_MD5) -> Arrays:
    """Parse an extracted cifar-10-batches-py folder, checking each file's MD5 first."""
    for name in TRAIN_FILES + TEST_FILES + (META_FILE,):
        path = folder / name
        if not path.is_file():
            raise DataUnavailable(f"CIFAR-10 file {path} is missing.")
        if file_md5 is not None and md5sum(path) != file_md5[name]:
            raise WorkerError(
                f"CIFAR-10 file {path} has the wrong checksum (MD5 {md5sum(path)}, expected "
                f"{file_md5[name]}): it is damaged or not the official file. Delete {folder} "
                "and run again.",
                exit_code=1,
            )
    parts = [parse_images(read_batch(folder / n), folder / n) for n in TRAIN_FILES]
    test_x, test_y = parse_images(read_batch(folder / TEST_FILES[0]), folder / TEST_FILES[0])
    meta = read_batch(folder / META_FILE)
    classes = [c.decode() if isinstance(c, bytes) else str(c) for c in meta.get("label_names", [])]
    return Arrays(
        np.concatenate([p[0] for p in parts]),
        np.concatenate([p[1] for p in parts]),
        test_x,
        test_y,
        classes,
    )


def extract(archive: Path, dest: Path, md5: str | None = ARCHIVE_MD5) -> Path:
    """Verify the archive and extract only the batch files into dest/cifar-10-batches-py."""
    if md5 is not None:
        got = md5sum(archive)
        if got != md5:
            raise WorkerError(
                f"{archive} has the wrong checksum (MD5 {got}, expected {md5}): the download "
                f"was incomplete or the file is not the official archive. Delete it and run "
                "again.",
                exit_code=1,
            )
    folder = dest / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    wanted = set(TRAIN_FILES + TEST_FILES + (META_FILE,))
    try:
        with tarfile.open(archive, "r:gz") as tar:
            for member in tar.getmembers():
                name = Path(member.name).name
                if member.isfile() and name in wanted:
                    src = tar.extractfile(member)
                    assert src is not None
                    (folder / name).write_bytes(src.read())
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise WorkerError(
            f"{archive} cannot be read as a tar.gz archive ({exc}). Delete it and run again.",
            exit_code=1,
        ) from exc
    return folder


def download(data_dir: Path, url: str | None = None, timeout: float = 30.0) -> Path:
    """Fetch the archive to data_dir (via a .part file, so a broken download never looks whole).

    MLBENCH_CIFAR10_URL may name a mirror (the archive's MD5 is checked all the same).
    """
    url = url or os.environ.get("MLBENCH_CIFAR10_URL") or URL
    try:
        return download_file.fetch(url, data_dir / ARCHIVE, timeout=timeout)
    except download_file.DownloadFailed as exc:
        raise DataUnavailable(
            f"Could not download CIFAR-10 from {exc}. {hand_placement_help(data_dir)}"
        ) from exc


def load_cache(data_dir: Path) -> Arrays | None:
    cache = data_dir / CACHE
    if not (cache / "complete").is_file():
        return None
    arrays = [np.load(cache / f) for f in CACHE_FILES]
    classes = (cache / "complete").read_text().split(",")
    return Arrays(*arrays, classes=classes)


def save_cache(data_dir: Path, arrays: Arrays) -> None:
    cache = data_dir / CACHE
    cache.mkdir(parents=True, exist_ok=True)
    for name, arr in zip(
        CACHE_FILES, (arrays.train_x, arrays.train_y, arrays.test_x, arrays.test_y), strict=True
    ):
        tmp = cache / f"{name}.tmp{os.getpid()}.npy"
        np.save(tmp, arr)
        os.replace(tmp, cache / name)
    # Written last: its presence means every array above is complete.
    (cache / "complete").write_text(",".join(arrays.classes))


def load(
    data_dir: Path,
    *,
    allow_download: bool = True,
    url: str | None = None,
    archive_md5: str | None = ARCHIVE_MD5,
    file_md5: dict[str, str] | None = FILE_MD5,
) -> Arrays:
    """CIFAR-10 from the first place that has it (see the module docstring).

    Raises DataUnavailable when there are no files and no download, WorkerError when a file
    is damaged. Several ranks on one machine may call this at once: a lock file serialises
    them so only the first downloads and parses.
    """
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    with FolderLock(data_dir / ".cifar10.lock"):
        cached = load_cache(data_dir)
        if cached is not None:
            return cached
        folder = data_dir / FOLDER
        if not (folder / TRAIN_FILES[0]).is_file():
            archive = data_dir / ARCHIVE
            if not archive.is_file():
                if not allow_download:
                    raise DataUnavailable(
                        f"CIFAR-10 is not in {data_dir}. {hand_placement_help(data_dir)}"
                    )
                download(data_dir, url)
            extract(archive, data_dir, archive_md5)
        arrays = parse_folder(folder, file_md5)
        save_cache(data_dir, arrays)
        return arrays
