"""WikiText-2 (Merity et al. 2016, arXiv:1609.07843) as token ids: the archive, its checksum,
the tokenisation and the vocabulary, written once for the task and the evaluator.

Task 3's training code (tasks/wikitext2/reader.py: where the files are looked for, the
download, the locks, the worker's errors) and the evaluator (shared/evaluation/
token_streams.py, which grades a model's perplexity on the validation stream it reads here
itself) must turn the same text into the same ids; this module is that rule, with numpy and
the standard library only (the shared room: no torch, nothing of any task).

The tokenised archive `wikitext-2-v1.zip` (4,475,746 bytes, MD5 below, as torchtext and the
AWD-LSTM authors' scripts give it) holds `wikitext-2/wiki.{train,valid,test}.tokens`: one
paragraph or heading (`= = Title = =`) per line, words separated by spaces, rare words
already replaced by `<unk>`, numbers split with `@-@`, `@,@` and `@.@` (kept as words), and
blank lines between paragraphs.

Tokenisation is the one the AWD-LSTM trained on (its `data.py`): every line, blank ones
included, becomes its words followed by `<eos>`. The vocabulary is the training split's
words in the order they first appear (33,278 with `<eos>`); the other splits use only words
of it (WikiText-2 is built that way; a word that is not is read as `<unk>`).

Problems are CorpusError, a ValueError whose message says what is wrong with which file and
whose `remedy` says what a person can do; each reader adds the remedy in its own words.
"""

from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlbench_worker.shared import data_files

ARCHIVE = "wikitext-2-v1.zip"
ARCHIVE_MD5 = "542ccefacc6c27f945fb54453812b3cd"
ARCHIVE_BYTES = 4_475_746
FOLDER = "wikitext-2"
SPLITS = ("train", "valid", "test")
EOS, UNK = "<eos>", "<unk>"


class CorpusError(ValueError):
    """A file that is not the official WikiText-2, or cannot be read; `remedy` says what to do."""

    def __init__(self, problem: str, remedy: str) -> None:
        super().__init__(problem)
        self.remedy = remedy


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

    def split(self, name: str) -> np.ndarray:
        """The ids of split `name` ("train", "valid" or "test")."""
        return {"train": self.train, "valid": self.valid, "test": self.test}[name]


def member(split: str) -> str:
    """The archive's member (and the extracted folder's file) holding `split`."""
    return f"{FOLDER}/wiki.{split}.tokens"


def tokenize(lines: list[str]) -> list[str]:
    """Every line's words, each line ended by <eos> (blank lines give a lone <eos>)."""
    out: list[str] = []
    for line in lines:
        out.extend(line.split())
        out.append(EOS)
    return out


def build(texts: dict[str, str], expected: Sizes | None = WIKITEXT2, where: str = "") -> Corpus:
    """The corpus of the three splits' texts, checked against `expected` when given
    (CorpusError when it differs)."""
    lines = {s: texts[s].splitlines() for s in SPLITS}
    tokens = {s: tokenize(lines[s]) for s in SPLITS}
    words = list(dict.fromkeys(tokens["train"]))
    if expected is not None:
        got = Sizes({s: len(lines[s]) for s in SPLITS}, len(tokens["train"]), len(words))
        if got != expected:
            raise CorpusError(
                f"WikiText-2 {where} is not the official text: it has {got.lines} lines, "
                f"{got.train_tokens} training tokens and {got.vocab} words, expected "
                f"{expected.lines}, {expected.train_tokens} and {expected.vocab}.",
                "Delete it and place the official archive.",
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
    """The three splits' texts from the zip archive, its MD5 checked first (when given);
    CorpusError when it is not the archive or cannot be read."""
    archive = Path(archive)
    if md5 is not None:
        got = data_files.file_digest(archive, "md5")
        if got != md5:
            raise CorpusError(
                f"{archive} has the wrong checksum (MD5 {got}, {archive.stat().st_size} bytes; "
                f"expected {md5}, {ARCHIVE_BYTES} bytes): the download was incomplete or the "
                "file is not the official archive.",
                "Delete it and run again, or place a fresh copy by hand.",
            )
    try:
        with zipfile.ZipFile(archive) as zf:
            return {s: zf.read(member(s)).decode("utf-8") for s in SPLITS}
    except KeyError as exc:
        raise CorpusError(
            f"{archive} is not a WikiText-2 archive: {exc}.", "Delete it and run again."
        ) from exc
    except (zipfile.BadZipFile, EOFError, OSError, UnicodeDecodeError, ValueError) as exc:
        raise CorpusError(
            f"{archive} is damaged or truncated and cannot be read as a zip archive ({exc}).",
            "Delete it and run again, or place a fresh copy by hand.",
        ) from exc


def write_archive(path: Path, texts: dict[str, str]) -> Path:
    """A zip in the archive's layout holding `texts` (tests and hand-made corpora)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for split in SPLITS:
            zf.writestr(member(split), texts[split])
    path = Path(path)
    path.write_bytes(buf.getvalue())
    return path
