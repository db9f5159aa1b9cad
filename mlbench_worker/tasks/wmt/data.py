"""Each rank's sentence pairs for task 4b: WMT17 (reader.py) or its generated stand-in,
encoded into sub-words (tokens.py) and served in batches of about `batch` tokens.

Partitioning: the N training pairs are cut into K contiguous shards of N // K pairs (rank
r holds pairs r*N//K up to (r+1)*N//K), disjoint and equal. Each rank groups its pairs by
length into batches of at most `batch` tokens counting padding (the longer side's length
times the pairs, fairseq's --max-tokens), once; an epoch visits its batches in a new
order. Every rank takes the same number of steps an epoch, the smallest number of batches
any rank has (the rest of a longer rank's batches wait for the next epoch's order).

The test set is every rank's: each decodes and scores its part (positions r, r + K, ...),
and rank 0 gathers the parts back into order (train.py).

The choice between WMT17 and the stand-in is made together, as for every task
(mlbench_worker.data.agree_on_real_data): with `auto`, if rank 0 cannot have WMT17, every
rank uses the generated corpus and says so loudly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from mlbench_worker.data import DataUnavailable, agree_on_real_data
from mlbench_worker.shared import test_sizes
from mlbench_worker.tasks.wmt import reader, synthetic, tokens
from mlbench_worker.training.comm import Communicator
from mlbench_worker.training.errors import WorkerError

FAMILY = "wmt17"


def shard_bounds(n: int, rank: int, world: int) -> tuple[int, int]:
    """[start, end) of rank `rank`'s contiguous part of n pairs."""
    size = n // world
    return rank * size, (rank + 1) * size


def token_batches(src_len: np.ndarray, tgt_len: np.ndarray, max_tokens: int) -> list[np.ndarray]:
    """The pairs (by position) grouped into batches of at most `max_tokens` tokens counting
    padding, similar lengths together; a pair longer than `max_tokens` alone is dropped."""
    longest = np.maximum(src_len, tgt_len)
    batches: list[np.ndarray] = []
    current: list[int] = []
    width = 0
    for pair in np.argsort(longest, kind="stable").tolist():
        size = int(longest[pair])
        if size > max_tokens:
            continue
        if current and max(width, size) * (len(current) + 1) > max_tokens:
            batches.append(np.array(current, dtype=np.int64))
            current, width = [], 0
        current.append(pair)
        width = max(width, size)
    if current:
        batches.append(np.array(current, dtype=np.int64))
    return batches


def pad(rows: list[np.ndarray], front: int | None = None) -> torch.Tensor:
    """Rows of ids in one padded (rows x longest) tensor, `front` put before each row."""
    extra = 0 if front is None else 1
    out = np.full((len(rows), max(len(r) for r in rows) + extra), tokens.PAD, dtype=np.int64)
    for i, r in enumerate(rows):
        if front is not None:
            out[i, 0] = front
        out[i, extra : extra + len(r)] = r
    return torch.from_numpy(out)


class PairBatches:
    """One rank's encoded pairs in token batches, served as the trainer's batches.

    `iterate` yields x = (source ids, decoder input: BOS then the target) and y = the
    target tokens to predict (not padding) flattened, so y.shape[0] is the step's target
    token count, the throughput's unit."""

    def __init__(self, shard: dict, max_tokens: int, device: torch.device, steps: int = 0):
        self.src, self.tgt = shard["src"], shard["tgt"]
        self.src_at, self.tgt_at = shard["src_offsets"], shard["tgt_offsets"]
        self.batches = token_batches(np.diff(self.src_at), np.diff(self.tgt_at), max_tokens)
        self.device = device
        self.common_steps = steps or len(self.batches)

    def __len__(self) -> int:
        return len(self.batches)

    @property
    def pairs(self) -> int:
        return len(self.src_at) - 1

    def steps(self, count: int) -> int:
        return min(count, self.common_steps)

    def rows(self, side: str, picks: np.ndarray) -> list[np.ndarray]:
        flat, at = (self.src, self.src_at) if side == "src" else (self.tgt, self.tgt_at)
        return [flat[at[i] : at[i + 1]] for i in picks.tolist()]

    def iterate(
        self, order: np.ndarray, generator: torch.Generator | None = None
    ) -> Iterator[tuple[tuple[torch.Tensor, torch.Tensor], torch.Tensor]]:
        for b in order.tolist():
            picks = self.batches[b]
            source = pad(self.rows("src", picks)).to(self.device)
            targets = self.rows("tgt", picks)
            decoder_in = pad([t[:-1] for t in targets], front=tokens.BOS).to(self.device)
            out = pad(targets).to(self.device)
            yield (source, decoder_in), out[out != tokens.PAD]


@dataclass
class TranslationData:
    name: str  # "wmt17" or "synthetic"
    model: bytes  # the SentencePiece model (serialized)
    train: dict  # this rank's encoded shard (tokens.encode_pairs)
    test_sources: list[np.ndarray]  # every test sentence's source ids (+ EOS), in order
    references: list[str]  # every test sentence's reference, detokenised, in order
    vocab: int
    train_total: int  # pairs of the whole training set used
    note: str = ""
    files: tuple[str, ...] = ()


def load(
    dataset: str,
    data_dir: str | Path,
    seed: int,
    comm: Communicator,
    *,
    train_pairs: int | None = None,
    test_sentences: int | None = None,
    say: Callable[[str], None] = print,
) -> TranslationData:
    """The data for `dataset` (auto | wmt17 | synthetic), agreed by all ranks; each rank
    keeps its shard. `train_pairs` keeps a prefix of the training pairs (for the generated
    corpus: how many are generated); `test_sentences` a prefix of the test set."""

    def check(total: int) -> None:
        if total // comm.size < 1:
            raise WorkerError(
                f"{total} training pairs are too few for {comm.size} workers (each needs one)",
                exit_code=1,
            )

    def finish(
        name: str, model: bytes, shard: dict, test: list[tuple[str, str]], total: int,
        note: str = "", files: list[str] | tuple[str, ...] = (),
    ) -> TranslationData:  # fmt: skip
        sp = tokens.processor(model)
        encoded = tokens.encode_pairs(sp, test)
        at = encoded["src_offsets"]
        sources = [encoded["src"][at[i] : at[i + 1]] for i in range(len(test))]
        refs = [b for _, b in test]
        return TranslationData(name, model, shard, sources, refs, sp.vocab_size(), total, note,
                               tuple(files))  # fmt: skip

    def generated(note: str = "") -> TranslationData:
        total = train_pairs or synthetic.TRAIN_PAIRS
        check(total)
        wanted = test_sentences or test_sizes.whole(FAMILY, test_sizes.SYNTHETIC)
        test = synthetic.generated_pairs(seed, "test", wanted)
        lo, hi = shard_bounds(total, comm.rank, comm.size)
        pairs = synthetic.generated_pairs(seed, "train", hi)
        model = None
        if comm.rank == 0:
            text = [s for pair in pairs for s in pair]
            if comm.size > 1:  # rank 0 needs every pair for the vocabulary, not only its own
                text = [s for pair in synthetic.generated_pairs(seed, "train", total) for s in pair]
            model = tokens.train_model(text, tokens.SYNTHETIC_VOCAB)
        model = comm.bcast_object(model)
        shard = tokens.encode_pairs(tokens.processor(model), pairs[lo:hi])
        return finish("synthetic", model, shard, test, total, note)

    if dataset == "synthetic":
        return generated()
    data_dir = Path(data_dir)

    def attempt(first: bool) -> tuple[reader.Corpus | None, str | None, bool]:
        try:
            return reader.load(data_dir, train_pairs=train_pairs), None, False
        except DataUnavailable as exc:
            return None, str(exc), True
        except WorkerError as exc:
            return None, str(exc), False

    corpus, unavailable = agree_on_real_data(comm, dataset, attempt)
    if unavailable is not None:
        return generated(f"WMT17 could not be had: {unavailable}")
    assert corpus is not None
    total = len(corpus.train)
    check(total)
    seen = comm.allgather_object((total, len(corpus.test)))
    if len(set(seen)) > 1:
        raise WorkerError(
            f"the ranks read different WMT17 files (training pairs, test sentences per rank: "
            f"{seen}); give every machine the same files",
            exit_code=1,
        )
    folder = data_dir / reader.wmt17.FOLDER
    key = tokens.cache_key(corpus.files, total, tokens.REAL_VOCAB)
    model = None
    if comm.rank == 0:
        text = [s for pair in corpus.train for s in pair]
        model = tokens.cached_model(
            folder, key, lambda: tokens.train_model(text, tokens.REAL_VOCAB)
        )
    comm.barrier()  # rank 0 has kept the model: the others read it (or it arrives below)
    model = comm.bcast_object(model)
    lo, hi = shard_bounds(total, comm.rank, comm.size)
    shard = tokens.cached_shard(
        folder, key, comm.rank, comm.size,
        lambda: tokens.encode_pairs(tokens.processor(model), corpus.train[lo:hi]),
    )  # fmt: skip
    test = corpus.test[: test_sentences or None]
    return finish(FAMILY, model, shard, test, total, files=corpus.files)
