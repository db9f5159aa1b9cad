"""A generated stand-in for WikiText-2 with a known best perplexity, for when the real text
cannot be had.

Word streams of a fixed random Markov chain over a vocabulary of WikiText-2's size (33,278
words, or `vocab` for smoke tests): every word has SUCCESSORS possible next words, drawn
once from a Zipf distribution over the vocabulary (so, as in text, a few words are frequent
and most are rare), followed with the probabilities NEXT. Uniform noise would leave nothing
to learn; this chain has a floor: no model can beat the entropy of NEXT, a perplexity of
BEST_PERPLEXITY (about 3.4), while a model that knows nothing scores the vocabulary's size.
Learning the word frequencies alone already lowers it far below that, and learning the
transitions approaches the floor, so a run shows whether a model learns.

The training, validation and test streams are walks of the same chain from different seeds,
of WikiText-2's lengths unless given. Every rank generates the same streams from the run's
seed and keeps its own part. Results on it are labelled "synthetic" everywhere and must
never be compared with WikiText-2 results.

The recipe lives in the shared room (numpy only) so that one rule serves the task
(tasks/wikitext2/synthetic.py names it for the task's code) and the evaluator, which
regenerates a run's validation stream from its seed, length and vocabulary to grade the
run's model (shared/evaluation/token_streams.py): a stream of another length is another
walk (the walkers are laid end to end), so the evaluator asks for the run's own length.
"""

from __future__ import annotations

import math

import numpy as np

from mlbench_worker.shared import test_sizes

VOCAB = 33_278
LENGTHS = {
    "train": 2_088_628,
    "valid": test_sizes.whole("wikitext2", test_sizes.SYNTHETIC),
    "test": 245_569,
}
SUCCESSORS = 4
NEXT = (0.5, 0.25, 0.15, 0.1)
BEST_PERPLEXITY = math.exp(-sum(p * math.log(p) for p in NEXT))
ZIPF = 1.1
WALKERS = 256
_STREAMS = {"train": 1, "valid": 2, "test": 3}


def chain(seed: int, vocab: int) -> np.ndarray:
    """The successors of every word (vocab x SUCCESSORS), all different for one word."""
    rng = np.random.default_rng([seed, 0x3A])
    weights = 1.0 / np.arange(1, vocab + 1) ** ZIPF
    out = rng.choice(vocab, size=(vocab, SUCCESSORS), p=weights / weights.sum())
    for j in range(1, SUCCESSORS):  # a repeated successor is drawn again, uniformly
        while (same := (out[:, j : j + 1] == out[:, :j]).any(axis=1)).any():
            out[same, j] = rng.integers(vocab, size=int(same.sum()))
    return out


def stream(seed: int, split: str, length: int, vocab: int = VOCAB) -> np.ndarray:
    """`length` words of the chain for `split` ("train", "valid" or "test").

    WALKERS walks advance together (one numpy step for all) and are laid end to end: a
    walk's first word does not follow the previous walk's last, which changes the best
    perplexity by less than WALKERS / length of a word's worth."""
    successors = chain(seed, vocab)
    rng = np.random.default_rng([seed, _STREAMS[split]])
    steps = -(-length // WALKERS)
    picks = rng.choice(SUCCESSORS, size=(steps, WALKERS), p=NEXT)
    word = rng.integers(vocab, size=WALKERS)
    out = np.empty((steps, WALKERS), dtype=np.int64)
    for t in range(steps):
        word = successors[word, picks[t]]
        out[t] = word
    return out.T.reshape(-1)[:length].copy()


def words(vocab: int) -> list[str]:
    """The stand-in's vocabulary (id -> word): made-up words, never WikiText-2's."""
    return [f"w{i}" for i in range(vocab)]
