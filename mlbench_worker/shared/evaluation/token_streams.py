"""Task 3's token streams as the evaluator establishes them: the stream a run evaluated its
perplexity on, never taken from the run or its training code.

A stream is fixed by what the run records: its data set (WikiText-2 or the generated
stand-in), its seed, the split (the validation stream, which the run evaluates; the test
stream too), how many tokens of it the run used (`valid_tokens` in its summary's config) and
its vocabulary (`vocab`):

- the stand-in: regenerated from the seed with the recipe the task itself draws it with
  (shared/wikitext2_synthetic.py, one rule for both). A walk of another length is another
  stream (its walkers are laid end to end), so the run's own length is asked for;
- WikiText-2: read from the official archive ``wikitext-2-v1.zip`` under the data
  directory, its MD5 checked first, and tokenised by shared/wikitext2.py's rule (the one
  the task trains with); the run's tokens are the split's first `length`. An extracted
  ``wikitext-2/`` folder is not read: its files have no published checksum (as with
  epsilon's plain text, keep the archive). The vocabulary must be the corpus's (33,278).

LabelsUnavailable (the evaluator's "cannot have the data") when the archive is missing,
damaged or not the official one; ValueError when the run's record does not describe a
stream that exists (a length past the split, another vocabulary).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlbench_worker.shared import wikitext2, wikitext2_synthetic
from mlbench_worker.shared.evaluation.file_labels import LabelsUnavailable

SYNTHETIC, WIKITEXT2 = "synthetic", "wikitext2"
SPLITS = ("valid", "test")


@dataclass(frozen=True)
class TokenStream:
    """The token stream a task-3 run evaluated on, as the run records it."""

    dataset: str  # "wikitext2" or "synthetic"
    seed: int  # the run's seed (the stand-in's stream depends on it)
    length: int  # tokens the run used (its config's valid_tokens)
    vocab: int  # words (its config's vocab)
    split: str = "valid"
    data_dir: str = ""  # where WikiText-2's archive is (the real set only)

    def describe(self) -> str:
        """How messages name the stream."""
        if self.dataset == SYNTHETIC:
            return (
                f"the generated {self.split} stream (seed {self.seed}, {self.length} tokens, "
                f"{self.vocab} words)"
            )
        return f"WikiText-2's {self.split} stream (first {self.length} tokens)"


def tokens(stream: TokenStream, md5: str = wikitext2.ARCHIVE_MD5) -> np.ndarray:
    """The token ids (int64) of `stream`, regenerated or read from the checksummed archive
    (`md5` can be given so tests can use a small archive in the real layout)."""
    if stream.split not in SPLITS:
        raise ValueError(f"split {stream.split!r} is not one of {', '.join(SPLITS)}")
    if stream.length < 1 or stream.vocab < 2:
        raise ValueError(f"{stream.describe()} is empty or has fewer than two words")
    if stream.dataset == SYNTHETIC:
        return wikitext2_synthetic.stream(stream.seed, stream.split, stream.length, stream.vocab)
    if stream.dataset != WIKITEXT2:
        raise ValueError(f"data set {stream.dataset!r} is not one of {WIKITEXT2}, {SYNTHETIC}")
    corpus = _corpus(Path(stream.data_dir), md5)
    if stream.vocab != corpus.vocab:
        raise ValueError(
            f"{stream.describe()} has {corpus.vocab} words; the run says {stream.vocab}"
        )
    found = corpus.split(stream.split)
    if stream.length > found.size:
        raise ValueError(
            f"{stream.describe()} asks for {stream.length} tokens; the split holds {found.size}"
        )
    return found[: stream.length].copy()


def _corpus(data_dir: Path, md5: str) -> wikitext2.Corpus:
    archive = data_dir / wikitext2.ARCHIVE
    if not archive.is_file():
        folder = data_dir / wikitext2.FOLDER
        raise LabelsUnavailable(
            f"WikiText-2's tokens need {archive} (its MD5 is known; "
            + (
                f"{folder} is there, but its files have no published checksum: keep the "
                "archive beside it)"
                if folder.is_dir()
                else "it is not there)"
            )
        )
    try:
        return wikitext2.build(wikitext2.read_archive(archive, md5), expected=None)
    except wikitext2.CorpusError as exc:
        raise LabelsUnavailable(f"{exc} The evaluator will not read tokens from it.") from None
