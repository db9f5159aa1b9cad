"""Each rank's tokens for task 3: WikiText-2 (reader.py) or its generated stand-in.

Partitioning, as language models are trained data-parallel: the training stream of N
tokens is cut into K contiguous shards of N // K tokens (rank r holds tokens r*N//K up to
(r+1)*N//K; the last N mod K are left out), so shards are disjoint, equal, and cover the
stream but for fewer than K tokens. Each rank lays its shard out in `batch` columns read
top to bottom (the AWD-LSTM's `batchify`): a step trains on the next rows of every column
at once, and the LSTM carries its state down each column from step to step. The
validation stream is cut the same way into K contiguous parts; every rank evaluates its
part and the sums of loss and tokens are all-reduced, so the perplexity is over the whole
validation stream (but the fewer than K x `eval columns` tokens cut at the parts' ends).

The choice between WikiText-2 and the stand-in is made together, as for every task
(mlbench_worker.data.agree_on_real_data): with `auto`, if rank 0 cannot have WikiText-2,
every rank uses synthetic data and says so loudly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from mlbench_worker.data import DataUnavailable, agree_on_real_data
from mlbench_worker.tasks.wikitext2 import reader, synthetic
from mlbench_worker.training.comm import Communicator
from mlbench_worker.training.errors import WorkerError

LSTM_EVAL_COLUMNS = 10  # the AWD-LSTM's evaluation batch


def shard_bounds(n: int, rank: int, world: int) -> tuple[int, int]:
    """[start, end) of rank `rank`'s contiguous part of an n-token stream."""
    size = n // world
    return rank * size, (rank + 1) * size


def batchify(tokens: np.ndarray, columns: int) -> np.ndarray:
    """The tokens in `columns` columns (rows x columns), read down each column; the tokens
    that do not fill a whole row are left out."""
    rows = len(tokens) // columns
    return np.ascontiguousarray(tokens[: rows * columns].reshape(columns, rows).T)


def lstm_steps(rows: int, bptt: int) -> int:
    """The steps of every epoch over `rows` rows in windows of mean length `bptt` (the
    number of lstm_windows, known before the trainer and its schedule are made)."""
    return max((rows - 1) // bptt, 1)


def lstm_windows(rows: int, bptt: int, seed: int, epoch: int) -> np.ndarray:
    """The (start row, length) of each step of an epoch over `rows` rows, the AWD-LSTM's
    random lengths: bptt with probability 0.95 else bptt / 2, then normal with standard
    deviation 5, at least 5 (and at most what is left). The same on every rank (seeded by
    the run and the epoch only), so every rank takes the same steps; an epoch is
    (rows - 1) // bptt steps (`lstm_steps`), and a window that would pass the end starts
    again at row 0."""
    steps = lstm_steps(rows, bptt)
    rng = np.random.default_rng([seed, epoch, 0x1A])
    out = np.empty((steps, 2), dtype=np.int64)
    start = 0
    for i in range(steps):
        base = bptt if rng.random() < 0.95 else bptt / 2
        length = max(5, int(rng.normal(base, 5)))
        if start >= rows - 1:
            start = 0
        length = min(length, rows - 1 - start)
        out[i] = (start, length)
        start += length
    return out


class Columns:
    """One rank's training tokens in columns, served as the trainer's batches.

    `iterate` yields, per window (start, length), the input rows x and the next-token
    targets y flattened (length * columns), so y.shape[0] is the step's token count."""

    def __init__(self, grid: np.ndarray, device: torch.device) -> None:
        self.grid = torch.from_numpy(grid).to(device)
        self.columns = grid.shape[1]

    def __len__(self) -> int:
        return self.grid.shape[0]

    @property
    def tokens(self) -> int:
        return self.grid.numel()

    def steps(self, count: int) -> int:
        return count  # one window a step

    def iterate(
        self, windows: np.ndarray, generator: torch.Generator | None = None
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for start, length in windows.tolist():
            yield (
                self.grid[start : start + length],
                self.grid[start + 1 : start + 1 + length].reshape(-1),
            )


class Blocks:
    """One rank's training tokens as blocks of `block` + 1 tokens (GPT): `iterate` yields
    `batch` blocks a step, inputs (batch x block) and targets flattened."""

    def __init__(self, tokens: np.ndarray, block: int, batch: int, device: torch.device) -> None:
        count = (len(tokens) - 1) // block
        starts = np.arange(count) * block
        self.x = torch.from_numpy(np.stack([tokens[s : s + block] for s in starts])).to(device)
        self.y = torch.from_numpy(np.stack([tokens[s + 1 : s + 1 + block] for s in starts])).to(
            device
        )
        self.batch = batch

    def __len__(self) -> int:
        return self.x.shape[0]

    @property
    def tokens(self) -> int:
        return self.x.numel()

    def steps(self, count: int) -> int:
        return count // self.batch  # whole batches only: every rank takes the same steps

    def iterate(
        self, order: np.ndarray, generator: torch.Generator | None = None
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        idx = torch.from_numpy(np.ascontiguousarray(order, dtype=np.int64)).to(self.x.device)
        for start in range(0, len(idx) - self.batch + 1, self.batch):
            part = idx[start : start + self.batch]
            yield self.x.index_select(0, part), self.y.index_select(0, part).reshape(-1)


@dataclass
class TokenData:
    name: str  # "wikitext2" or "synthetic"
    train: np.ndarray  # this rank's training shard
    valid: np.ndarray  # this rank's part of the validation stream
    vocab: int
    train_total: int  # tokens of the whole training stream
    valid_total: int
    note: str = ""


def load(
    dataset: str,
    data_dir: str | Path,
    seed: int,
    comm: Communicator,
    *,
    vocab: int | None = None,
    train_tokens: int | None = None,
    valid_tokens: int | None = None,
    say: Callable[[str], None] = print,
) -> TokenData:
    """The data for `dataset` (auto | wikitext2 | synthetic), agreed by all ranks; each rank
    keeps only its shard. `train_tokens` / `valid_tokens` keep a prefix of either stream;
    `vocab` sizes the stand-in (the real set has its own)."""

    def cut(name: str, train: np.ndarray, valid: np.ndarray, words: int, note: str = ""):
        train, valid = train[: train_tokens or None], valid[: valid_tokens or None]
        # Every rank evaluates at least two rows of the LSTM's evaluation columns: a part
        # with no whole row would count no token at all.
        if len(train) // comm.size < 2 or len(valid) // comm.size < 2 * LSTM_EVAL_COLUMNS:
            raise WorkerError(
                f"{len(train)} training and {len(valid)} validation tokens are too few for "
                f"{comm.size} workers (each needs 2 training and {2 * LSTM_EVAL_COLUMNS} "
                "validation tokens at least)",
                exit_code=1,
            )
        lo, hi = shard_bounds(len(train), comm.rank, comm.size)
        vlo, vhi = shard_bounds(len(valid), comm.rank, comm.size)
        return TokenData(name, train[lo:hi], valid[vlo:vhi], words, len(train), len(valid), note)

    def generated(note: str = "") -> TokenData:
        words = vocab or synthetic.VOCAB
        n_train = train_tokens or synthetic.LENGTHS["train"]
        n_valid = valid_tokens or synthetic.LENGTHS["valid"]
        train = synthetic.stream(seed, "train", n_train, words)
        valid = synthetic.stream(seed, "valid", n_valid, words)
        return cut("synthetic", train, valid, words, note)

    if dataset == "synthetic":
        return generated()
    data_dir = Path(data_dir)

    def attempt(first: bool) -> tuple[reader.Corpus | None, str | None, bool]:
        try:
            return reader.load(data_dir), None, False
        except DataUnavailable as exc:
            return None, str(exc), True
        except WorkerError as exc:
            return None, str(exc), False

    corpus, unavailable = agree_on_real_data(comm, dataset, attempt)
    if unavailable is not None:
        return generated(f"WikiText-2 could not be had: {unavailable}")
    assert corpus is not None
    seen = comm.allgather_object((len(corpus.train), corpus.vocab))
    if len(set(seen)) > 1:
        raise WorkerError(
            f"the ranks read different WikiText-2 files (tokens, words per rank: {seen}); "
            "give every machine the same archive",
            exit_code=1,
        )
    return cut("wikitext2", corpus.train, corpus.valid, corpus.vocab)
