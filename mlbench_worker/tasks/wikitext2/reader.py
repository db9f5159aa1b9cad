"""WikiText-2 (Merity et al. 2016, arXiv:1609.07843) from its canonical archive: fetch,
verify, parse into token ids.

Our own reader because no maintained library fits: torchtext's data sets are retired,
Hugging Face `datasets` would bring a second download path and cache we cannot use offline,
and the format is simple. The tokenised archive `wikitext-2-v1.zip` (4,475,746 bytes, MD5
below, as torchtext and the AWD-LSTM authors' scripts give it) holds `wikitext-2/wiki.
{train,valid,test}.tokens`: one paragraph or heading (`= = Title = =`) per line, words
separated by spaces, rare words already replaced by `<unk>`, numbers split with `@-@`,
`@,@` and `@.@` (kept as words), and blank lines between paragraphs.

Tokenisation is the one the AWD-LSTM trained on (its `data.py`): every line, blank ones
included, becomes its words followed by `<eos>`. The vocabulary is the training split's
words in the order they first appear (33,278 with `<eos>`); the other splits use only
words of it (WikiText-2 is built that way; a word that is not is read as `<unk>`).

Where the text is looked for, in order: an extracted `wikitext-2/` folder, the archive
`wikitext-2-v1.zip` in the data directory, then a download (MLBENCH_WIKITEXT2_URL may name
a mirror; the archive's MD5 is checked all the same). An extracted folder is checked against
the data set's published sizes instead (lines per split, training tokens, vocabulary).
Parsing takes about a second, so nothing is cached.
"""

from __future__ import annotations

import io
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlbench_worker.data import DataUnavailable, FolderLock
from mlbench_worker.data import download as download_file
from mlbench_worker.shared import data_files
from mlbench_worker.training.errors import WorkerError

URLS = (
    "https://wikitext.smerity.com/wikitext-2-v1.zip",
    "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-2-v1.zip",
)
ARCHIVE = "wikitext-2-v1.zip"
ARCHIVE_MD5 = "542ccefacc6c27f945fb54453812b3cd"
ARCHIVE_BYTES = 4_475_746
FOLDER = "wikitext-2"
SPLITS = ("train", "valid", "test")
EOS, UNK = "<eos>", "<unk>"


@dataclass(frozen=True)
class Sizes:
    """What the real data set holds: lines per split, training tokens, vocabulary."""

    lines: dict[str, int]
    train_tokens: int
    vocab: int


WIKITEXT2 = Sizes({"train": 36_718, "valid": 3_760, "test": 4_358}, 2_088_628, 33_278)


@dataclass
class Corpus:
    """The three splits as token ids (int64) and the vocabulary (id -> word)."""

    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray
    words: list[str]

    @property
    def vocab(self) -> int:
        return len(self.words)


def member(split: str) -> str:
    return f"{FOLDER}/wiki.{split}.tokens"


def hand_placement_help(data_dir: Path) -> str:
    """How to put the data in place without network access (part of every failure message)."""
    return (
        f"To place it by hand, download {URLS[0]} (or {URLS[1]}; {ARCHIVE_BYTES} bytes, MD5 "
        f"{ARCHIVE_MD5}) on a machine with access and copy it to {data_dir / ARCHIVE} (or "
        f"extract it so that {data_dir / member('train')} exists); or use --dataset synthetic."
    )


def tokenize(lines: list[str]) -> list[str]:
    """Every line's words, each line ended by <eos> (blank lines give a lone <eos>)."""
    out: list[str] = []
    for line in lines:
        out.extend(line.split())
        out.append(EOS)
    return out


def build(texts: dict[str, str], expected: Sizes | None = WIKITEXT2, where: str = "") -> Corpus:
    """The corpus of the three splits' texts, checked against `expected` when given."""
    lines = {s: texts[s].splitlines() for s in SPLITS}
    tokens = {s: tokenize(lines[s]) for s in SPLITS}
    words = list(dict.fromkeys(tokens["train"]))
    if expected is not None:
        got = Sizes({s: len(lines[s]) for s in SPLITS}, len(tokens["train"]), len(words))
        if got != expected:
            raise WorkerError(
                f"WikiText-2 {where} is not the official text: it has {got.lines} lines, "
                f"{got.train_tokens} training tokens and {got.vocab} words, expected "
                f"{expected.lines}, {expected.train_tokens} and {expected.vocab}. Delete it "
                "and place the official archive.",
                exit_code=1,
            )
    if UNK not in words:
        words.append(UNK)
    index = {w: i for i, w in enumerate(words)}
    unk = index[UNK]
    ids = {
        s: np.fromiter((index.get(w, unk) for w in tokens[s]), np.int64, len(tokens[s]))
        for s in SPLITS
    }
    return Corpus(ids["train"], ids["valid"], ids["test"], words)


def read_archive(archive: Path, md5: str | None = ARCHIVE_MD5) -> dict[str, str]:
    """The three splits' texts from the zip archive, its MD5 checked first (when given)."""
    if md5 is not None:
        got = data_files.file_digest(archive, "md5")
        if got != md5:
            raise WorkerError(
                f"{archive} has the wrong checksum (MD5 {got}, {archive.stat().st_size} bytes; "
                f"expected {md5}, {ARCHIVE_BYTES} bytes): the download was incomplete or the "
                "file is not the official archive. Delete it and run again, or place a fresh "
                "copy by hand.",
                exit_code=1,
            )
    try:
        with zipfile.ZipFile(archive) as zf:
            return {s: zf.read(member(s)).decode("utf-8") for s in SPLITS}
    except KeyError as exc:
        raise WorkerError(
            f"{archive} is not a WikiText-2 archive: {exc}. Delete it and run again.", exit_code=1
        ) from exc
    except (zipfile.BadZipFile, EOFError, OSError, UnicodeDecodeError, ValueError) as exc:
        raise WorkerError(
            f"{archive} is damaged or truncated and cannot be read as a zip archive ({exc}). "
            "Delete it and run again, or place a fresh copy by hand.",
            exit_code=1,
        ) from exc


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


def write_archive(path: Path, texts: dict[str, str]) -> Path:
    """A zip in the archive's layout holding `texts` (tests and hand-made corpora)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for split in SPLITS:
            zf.writestr(member(split), texts[split])
    path.write_bytes(buf.getvalue())
    return path
