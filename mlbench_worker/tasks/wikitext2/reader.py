"""WikiText-2 (Merity et al. 2016, arXiv:1609.07843) for task 3's ranks: where it is looked
for, the download, and the worker's errors.

What the text is and how it becomes token ids (the archive's name and MD5, the tokenisation
the AWD-LSTM trained on, the vocabulary in order of first appearance) is
mlbench_worker/shared/wikitext2.py's, written once for this reader and the evaluator, which
reads the validation stream itself to grade a model's perplexity; its names are re-exported
here. Our own reader because no maintained library fits: torchtext's data sets are retired,
Hugging Face `datasets` would bring a second download path and cache we cannot use offline,
and the format is simple.

Where the text is looked for, in order: an extracted `wikitext-2/` folder, the archive
`wikitext-2-v1.zip` in the data directory, then a download (MLBENCH_WIKITEXT2_URL may name
a mirror; the archive's MD5 is checked all the same). An extracted folder is checked against
the data set's published sizes instead (lines per split, training tokens, vocabulary).
Parsing takes about a second, so nothing is cached.
"""

from __future__ import annotations

import os
from pathlib import Path

from mlbench_worker.data import DataUnavailable, FolderLock
from mlbench_worker.data import download as download_file
from mlbench_worker.shared import wikitext2 as text
from mlbench_worker.shared.wikitext2 import (
    ARCHIVE,
    ARCHIVE_BYTES,
    ARCHIVE_MD5,
    EOS,
    FOLDER,
    SPLITS,
    UNK,
    WIKITEXT2,
    Corpus,
    Sizes,
    member,
    tokenize,
    write_archive,
)
from mlbench_worker.training.errors import WorkerError

# The shared rule's names this module re-exports (the task's code and tests use them here).
__all__ = [
    "ARCHIVE", "ARCHIVE_BYTES", "ARCHIVE_MD5", "EOS", "FOLDER", "SPLITS", "UNK", "WIKITEXT2",
    "Corpus", "Sizes", "build", "download", "hand_placement_help", "load", "member",
    "read_archive", "read_folder", "tokenize", "write_archive",
]  # fmt: skip

URLS = (
    "https://wikitext.smerity.com/wikitext-2-v1.zip",
    "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-2-v1.zip",
)


def hand_placement_help(data_dir: Path) -> str:
    """How to put the data in place without network access (part of every failure message)."""
    return (
        f"To place it by hand, download {URLS[0]} (or {URLS[1]}; {ARCHIVE_BYTES} bytes, MD5 "
        f"{ARCHIVE_MD5}) on a machine with access and copy it to {data_dir / ARCHIVE} (or "
        f"extract it so that {data_dir / member('train')} exists); or use --dataset synthetic."
    )


def build(texts: dict[str, str], expected: Sizes | None = WIKITEXT2, where: str = "") -> Corpus:
    """The corpus of the three splits' texts (shared/wikitext2.py's rule), checked against
    `expected` when given; WorkerError when it differs."""
    try:
        return text.build(texts, expected, where)
    except text.CorpusError as exc:
        raise WorkerError(f"{exc} {exc.remedy}", exit_code=1) from exc


def read_archive(archive: Path, md5: str | None = ARCHIVE_MD5) -> dict[str, str]:
    """The three splits' texts from the zip archive, its MD5 checked first (when given);
    WorkerError when it is not the archive or cannot be read."""
    try:
        return text.read_archive(archive, md5)
    except text.CorpusError as exc:
        raise WorkerError(f"{exc} {exc.remedy}", exit_code=1) from exc


def read_folder(folder: Path) -> dict[str, str]:
    texts = {}
    for split in SPLITS:
        path = folder / f"wiki.{split}.tokens"
        if not path.is_file():
            raise DataUnavailable(f"WikiText-2 file {path} is missing.")
        texts[split] = path.read_text(encoding="utf-8")
    return texts


def download(data_dir: Path, timeout: float = 30.0) -> Path:
    """Fetch the archive to data_dir via a .part file, trying each URL in turn."""
    urls = [os.environ["MLBENCH_WIKITEXT2_URL"]] if os.environ.get("MLBENCH_WIKITEXT2_URL") else []
    errors = []
    for url in [*urls, *URLS]:
        try:
            return download_file.fetch(url, data_dir / ARCHIVE, timeout=timeout)
        except download_file.DownloadFailed as exc:
            errors.append(str(exc))
    raise DataUnavailable(
        f"Could not download WikiText-2 ({'; '.join(errors)}). {hand_placement_help(data_dir)}"
    )


def load(
    data_dir: Path,
    *,
    allow_download: bool = True,
    archive_md5: str | None = ARCHIVE_MD5,
    expected: Sizes | None = WIKITEXT2,
) -> Corpus:
    """WikiText-2 from the first place that has it (see the module docstring).

    DataUnavailable when there are no files and no download; WorkerError when they are
    damaged. Ranks on one machine take turns (a lock file), so only the first downloads.
    """
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    with FolderLock(data_dir / ".wikitext2.lock"):
        folder = data_dir / FOLDER
        if (folder / "wiki.train.tokens").is_file():
            return build(read_folder(folder), expected, str(folder))
        archive = data_dir / ARCHIVE
        if not archive.is_file():
            if not allow_download:
                raise DataUnavailable(
                    f"WikiText-2 is not in {data_dir}. {hand_placement_help(data_dir)}"
                )
            download(data_dir)
        texts = read_archive(archive, archive_md5)
        return build(texts, expected if archive_md5 is None else None, str(archive))
