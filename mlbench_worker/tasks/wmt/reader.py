"""WMT17 English-German for task 4b's ranks: where the files are looked for, the test set's
download, and the worker's errors.

What the files are and how the test set's SGML is read is mlbench_worker/shared/wmt17.py's
(the evaluator reads the same references). Looked for under `<data dir>/wmt17/`, at any
depth (archives extract into folders of their own): newstest2017's two SGML files, or
`test.tgz`, downloaded when missing (MLBENCH_WMT17_URL may name a mirror; the archive's MD5
is checked all the same, and a wrong one keeps nothing; a hand-placed archive is checked
before it is extracted); and every pair of training files
of shared/wmt17.TRAINING that is there, read in that order (at least one pair is needed;
the training archives are placed by hand, see the module there).
"""

from __future__ import annotations

import hashlib
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path

from mlbench_worker.data import DataUnavailable, FolderLock
from mlbench_worker.data import download as download_file
from mlbench_worker.shared import wmt17
from mlbench_worker.training.errors import WorkerError


@dataclass
class Corpus:
    """The real corpus as text: training pairs (a prefix when asked) and the test set."""

    train: list[tuple[str, str]]
    test: list[tuple[str, str]]
    files: list[str]  # the training files read, for the run's record


def hand_placement_help(folder: Path) -> str:
    """How to put the data in place without network access (part of every failure message)."""
    archives = ", ".join(url for _, _, url in wmt17.TRAINING)
    return (
        f"To place it by hand, download {wmt17.TEST_ARCHIVE_URL} (MD5 {wmt17.TEST_ARCHIVE_MD5}) "
        f"and the training archives ({archives}) on a machine with access and extract them "
        f"under {folder}; or use --dataset synthetic."
    )


def download_test_set(folder: Path, timeout: float = 30.0) -> Path:
    """test.tgz into `folder`, its MD5 checked as it arrives (nothing kept when wrong);
    DataUnavailable when no URL gives it, WorkerError when one gives another file."""
    mirror = os.environ.get("MLBENCH_WMT17_URL")
    errors = []
    for url in [mirror] if mirror else [wmt17.TEST_ARCHIVE_URL]:
        try:
            return download_file.fetch(
                url, folder / wmt17.TEST_ARCHIVE, timeout=timeout,
                digest=("md5", wmt17.TEST_ARCHIVE_MD5),
            )  # fmt: skip
        except download_file.WrongDigest as exc:
            raise WorkerError(str(exc), exit_code=1) from None
        except download_file.DownloadFailed as exc:
            errors.append(str(exc))
    raise DataUnavailable(
        f"Could not download WMT17's test set ({'; '.join(errors)}). {hand_placement_help(folder)}"
    )


def _test_files(folder: Path, allow_download: bool) -> tuple[Path, Path]:
    source = wmt17.find(folder, wmt17.TEST_SOURCE)
    reference = wmt17.find(folder, wmt17.TEST_REFERENCE)
    if source and reference:
        return source, reference
    archive = folder / wmt17.TEST_ARCHIVE
    if not archive.is_file():
        if not allow_download:
            raise DataUnavailable(f"newstest2017 is not in {folder}. {hand_placement_help(folder)}")
        download_test_set(folder)
    got = hashlib.md5(archive.read_bytes()).hexdigest()  # noqa: S324 - the published digest
    if got != wmt17.TEST_ARCHIVE_MD5:
        raise WorkerError(
            f"{archive} has the wrong checksum (MD5 {got}, expected {wmt17.TEST_ARCHIVE_MD5}): "
            f"it is not WMT17's test archive. {hand_placement_help(folder)}",
            exit_code=1,
        )
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(folder, members=[tar.getmember(m) for m in wmt17.TEST_MEMBERS],
                           filter="data")  # fmt: skip
    except (tarfile.TarError, KeyError, OSError) as exc:
        raise WorkerError(
            f"{archive} is not WMT17's test archive ({exc}). {hand_placement_help(folder)}",
            exit_code=1,
        ) from None
    return folder / wmt17.TEST_MEMBERS[0], folder / wmt17.TEST_MEMBERS[1]


def _pairs(english: Path, german: Path, room: int | None) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    try:
        with open(english, encoding="utf-8") as en, open(german, encoding="utf-8") as de:
            for a, b in zip(en, de, strict=True):
                if room is not None and len(out) >= room:
                    break
                a, b = a.strip(), b.strip()
                if a and b:  # WMT's crawled corpora hold empty lines; a pair needs both
                    out.append((a, b))
    except ValueError as exc:  # zip's strict check, or a line that is not UTF-8
        raise WorkerError(
            f"{english} and {german} are not a parallel pair of UTF-8 text files ({exc})",
            exit_code=1,
        ) from None
    return out


def load(data_dir: Path, *, train_pairs: int | None = None, allow_download: bool = True) -> Corpus:
    """The real corpus from `<data_dir>/wmt17` (see the module docstring). DataUnavailable
    when files are missing; WorkerError when they are damaged. Ranks on one machine take
    turns (a lock file), so only the first downloads."""
    folder = Path(data_dir) / wmt17.FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    with FolderLock(Path(data_dir) / ".wmt17.lock"):
        source, reference = _test_files(folder, allow_download)
    try:
        sources, references = wmt17.read_sgm(source), wmt17.read_sgm(reference)
    except wmt17.SgmError as exc:
        raise WorkerError(str(exc), exit_code=1) from None
    if len(sources) != len(references):
        raise WorkerError(
            f"{source} holds {len(sources)} segments and {reference} {len(references)}: "
            "they are not one test set",
            exit_code=1,
        )
    train: list[tuple[str, str]] = []
    files = []
    for english, german, _url in wmt17.TRAINING:
        en, de = wmt17.find(folder, english), wmt17.find(folder, german)
        if en is None or de is None:
            continue
        room = None if train_pairs is None else train_pairs - len(train)
        if room == 0:
            break
        train += _pairs(en, de, room)
        files += [str(en), str(de)]
    if not train:
        raise DataUnavailable(
            f"no WMT17 training files under {folder} (looked for "
            f"{', '.join(en for en, _, _ in wmt17.TRAINING)} and their German sides). "
            f"{hand_placement_help(folder)}"
        )
    return Corpus(train, list(zip(sources, references, strict=True)), files)
