"""Task 3's perplexity graded from the model: the evaluator runs a run's ONNX model over the
validation stream it owns (token_streams.py) and computes the mean cross-entropy per token,
its exp (the perplexity) and the next-token accuracy itself, over exactly the positions the
run's own evaluation covers (tasks/wikitext2/train.py, `evaluate`).

What the run must record so its evaluation can be reproduced (its summary's config and its
row): the task (hence the family: ``lstm`` for awd-lstm-wikitext2, ``gpt`` for
gpt-wikitext2), the number of workers K, the data set, seed, ``valid_tokens`` and ``vocab``
(the stream), and the evaluation's geometry: the LSTM's ``eval_columns`` (10) and ``bptt``
(its window), the GPT's ``block``. `Geometry.of_run` reads them.

The run's evaluation, reproduced:

- the stream of n tokens is cut into K parts of n // K tokens (rank r evaluates the r-th);
  each part is evaluated alone, and the sums of all parts make the result;
- LSTM: a part is laid out in C columns of n // K // C rows (the AWD-LSTM's `batchify`);
  each column starts from the zero state and is read in windows of `window` rows with the
  state carried, every token but a column's first predicted from those above it:
  (rows - 1) x C positions a part. The K x C columns are independent, so the evaluator runs
  them side by side (at most LOGITS_PER_RUN logits a forward pass);
- GPT: a part's tokens but its last are cut into consecutive blocks of `window` tokens, the
  last block shorter when they do not divide, each token predicted from the tokens before
  it in its block: n // K - 1 positions a part.

The loss of a position is log-sum-exp of its logits minus its target's logit, computed
here from the model's logits (a model does not normalise its own scores), summed in
float64. The run sums float32 cross-entropies per window (per batch of 32 blocks) into
float64 instead: on the tiny models the two means agree within 1e-7 of the loss, and a
float32 sum of a window's 700 or a batch's 4,096 terms can be off by a few 1e-6 of it, so
the tests hold them within 1e-5; the accuracy to a position or two (a near tie that float32
rounding ranks otherwise; none seen).

Cost: the whole stream by default, which is what the run evaluated. `max_tokens` bounds it:
then only the first rows of every column (LSTM) or the first blocks of every part (GPT) are
scored, each position as the run scored it (up to rounding), so the result is the run's
mean over a subset of its positions, not its value, and says so (`Score.whole`). One
onnxruntime thread here scored 307 tokens a second with the task's AWD-LSTM (about 67
MFLOP a token, 40 % of it the decoder over 33,278 words) and 669 with the small GPT (about
25), half that under load: WikiText-2's 217,646 validation tokens take 12 to 22 and 5 to 8
minutes.

Before scoring, a few windows of the evaluation are probed for a model that looks ahead
(language_model.causal_probe, with `probe_seed`). numpy and onnxruntime only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mlbench_worker.shared import catalogue
from mlbench_worker.shared.evaluation import token_streams
from mlbench_worker.shared.evaluation.language_model import (
    GPT,
    LOGITS_PER_RUN,
    LSTM,
    THREADS,
    LanguageModel,
    ModelRefused,
    causal_probe,
)

EVAL_COLUMNS = 10  # the AWD-LSTM's evaluation columns (tasks/wikitext2/data.LSTM_EVAL_COLUMNS)
PROBE_WINDOWS = 4

__all__ = ["GPT", "LSTM", "Geometry", "ModelRefused", "Score", "family_of", "grade", "score"]


def family_of(task: str) -> str:
    """The model family of a task-3 catalogue name; ValueError for another task."""
    try:
        info = catalogue.get(task)
    except catalogue.UnknownTask as exc:
        raise ValueError(str(exc)) from None
    if info.dataset != "wikitext2":
        raise ValueError(f"task {task!r} is not a language model's: it has no perplexity")
    return LSTM if info.model.startswith("awd-lstm") else GPT


@dataclass(frozen=True)
class Geometry:
    """How a run evaluated its perplexity: `workers` parts, and the LSTM's `columns` read in
    windows of `window` rows, or the GPT's blocks of `window` tokens."""

    family: str
    workers: int
    window: int
    columns: int = EVAL_COLUMNS

    @classmethod
    def of_run(cls, task: str, workers: int, config: dict[str, Any]) -> Geometry:
        """The geometry of a run of `task` with `workers` workers, from its summary's config
        (``bptt`` and ``eval_columns``, or ``block``); a run that did not record
        ``eval_columns`` evaluated with EVAL_COLUMNS."""
        family = family_of(task)
        if family == LSTM:
            columns = int(config.get("eval_columns", EVAL_COLUMNS))
            return cls(LSTM, workers, int(config["bptt"]), columns)
        return cls(GPT, workers, int(config["block"]), 0)

    def positions(self, n: int) -> int:
        """How many positions the run's evaluation of an n-token stream scores."""
        part = n // self.workers
        if self.family == LSTM:
            return max(part // self.columns - 1, 0) * self.columns * self.workers
        return max(part - 1, 0) * self.workers

    def check(self, n: int) -> None:
        """ValueError when this geometry evaluates nothing of an n-token stream."""
        if self.family not in (LSTM, GPT):
            raise ValueError(f"model family {self.family!r} is not one of {LSTM}, {GPT}")
        if self.workers < 1 or self.window < 1 or (self.family == LSTM and self.columns < 1):
            raise ValueError(f"{self} evaluates nothing")
        if self.positions(n) < 1:
            raise ValueError(f"{self} scores no position of a stream of {n} tokens")


@dataclass(frozen=True)
class Score:
    """The evaluator's grade of a language model on a stream."""

    loss: float  # mean cross-entropy per token, in nats
    perplexity: float  # exp(loss)
    accuracy: float  # share of positions whose highest logit is the next token
    tokens: int  # positions scored
    whole: bool  # all the positions the run's evaluation covers (False: cut by max_tokens)


class _Sums:
    def __init__(self) -> None:
        self.loss, self.right, self.count = 0.0, 0, 0

    def add(self, logits: np.ndarray, targets: np.ndarray) -> None:
        flat = logits.reshape(-1, logits.shape[-1])
        y = targets.reshape(-1)
        top = flat.max(axis=1)
        total = np.exp(flat - top[:, None]).sum(axis=1, dtype=np.float64)
        picked = flat[np.arange(y.size), y].astype(np.float64)
        self.loss += float((top + np.log(total) - picked).sum())
        self.right += int((flat.argmax(axis=1) == y).sum())
        self.count += int(y.size)


def perplexity(mean_loss: float) -> float:
    """exp of the mean cross-entropy (inf past what a float holds), as the run computes it."""
    return math.exp(mean_loss) if mean_loss < 700 else math.inf


def _columns(tokens: np.ndarray, g: Geometry) -> np.ndarray:
    """The K x C columns of the run's evaluation, one a row (workers' parts in order)."""
    part = tokens.size // g.workers
    rows = part // g.columns
    parts = tokens[: g.workers * part].reshape(g.workers, part)[:, : rows * g.columns]
    return parts.reshape(g.workers * g.columns, rows)


def _blocks(tokens: np.ndarray, g: Geometry, limit: int | None) -> list[np.ndarray]:
    """The run's blocks with the token after each (window + 1 wide; the shorter last ones
    apart), the first blocks of every part first; at most `limit` blocks a part."""
    part = tokens.size // g.workers
    parts = tokens[: g.workers * part].reshape(g.workers, part)
    full = (part - 1) // g.window
    count = full if limit is None else min(full, limit)
    groups = [
        np.stack([parts[:, s * g.window : (s + 1) * g.window + 1] for s in range(count)], axis=1)
        .reshape(-1, g.window + 1)
    ] if count else []  # fmt: skip
    if (limit is None or limit > full) and part - 1 > full * g.window:
        groups.append(parts[:, full * g.window :])
    return groups


def _score_lstm(
    model: LanguageModel,
    cols: np.ndarray,
    g: Geometry,
    rows: int,
    sums: _Sums,
    rng: np.random.Generator,
) -> None:
    """The columns side by side, window after window with the state carried; one window of
    the first group (drawn with `rng`) probed for a look ahead first, with its state."""
    starts = range(0, rows - 1, g.window)
    probed = starts[int(rng.integers(len(starts)))]
    per_run = max(1, LOGITS_PER_RUN // (g.window * model.vocab))
    for first in range(0, cols.shape[0], per_run):
        group = cols[first : first + per_run]
        state = model.zero_state(group.shape[0])
        for start in starts:
            stop = min(start + g.window, rows - 1)
            if first == 0 and start == probed:
                picked = rng.choice(group.shape[0], min(PROBE_WINDOWS, group.shape[0]), False)
                causal_probe(model, [(group[i, start:stop], state[i]) for i in picked], rng)
            logits, state = model.run(group[:, start:stop], state)
            sums.add(logits, group[:, start + 1 : stop + 1])


def _score_gpt(
    model: LanguageModel, groups: list[np.ndarray], sums: _Sums, rng: np.random.Generator
) -> None:
    """The blocks in batches; a few of the first group's (drawn with `rng`) probed first."""
    for number, blocks in enumerate(groups):
        width = blocks.shape[1] - 1
        if number == 0:
            picked = rng.choice(blocks.shape[0], min(PROBE_WINDOWS, blocks.shape[0]), False)
            causal_probe(model, [(blocks[i, :width], None) for i in picked], rng)
        per_run = max(1, LOGITS_PER_RUN // (width * model.vocab))
        for first in range(0, blocks.shape[0], per_run):
            chunk = blocks[first : first + per_run]
            logits, _ = model.run(chunk[:, :width])
            sums.add(logits, chunk[:, 1:])


def score(
    model: LanguageModel,
    tokens: np.ndarray,
    geometry: Geometry,
    *,
    max_tokens: int | None = None,
    probe_seed: int = 0,
) -> Score:
    """The mean cross-entropy, perplexity and accuracy of `model` over the positions the
    run's evaluation (`geometry`) covers of `tokens` (the stream the run evaluated), all of
    them or, with `max_tokens`, the first of each column or part (see the module
    docstring); ModelRefused for a model off the contract, a look ahead, or NaN; ValueError
    for a geometry or bound that scores nothing."""
    tokens = np.asarray(tokens)
    if tokens.ndim != 1 or tokens.dtype.kind not in "iu":
        raise ValueError("the stream must be one row of integer token ids")
    if geometry.family != model.family:
        raise ValueError(f"a {geometry.family} evaluation of a {model.family} model")
    geometry.check(tokens.size)
    if tokens.min() < 0 or tokens.max() >= model.vocab:
        raise ValueError(f"the stream holds ids outside the vocabulary of {model.vocab} words")
    rng = np.random.default_rng([probe_seed, 0x7E])
    sums = _Sums()
    whole = geometry.positions(tokens.size)
    if geometry.family == LSTM:
        cols = _columns(tokens.astype(np.int64), geometry)
        rows = cols.shape[1]
        if max_tokens is not None:
            rows = min(rows, max_tokens // cols.shape[0] + 1)
            if rows < 2:
                raise ValueError(
                    f"max_tokens {max_tokens} is less than a row of {cols.shape[0]} columns"
                )
        _score_lstm(model, cols, geometry, rows, sums, rng)
    else:
        limit = None
        if max_tokens is not None:
            limit = max_tokens // (geometry.workers * geometry.window)
            if limit < 1:
                raise ValueError(
                    f"max_tokens {max_tokens} is less than a block of every part "
                    f"({geometry.workers} x {geometry.window})"
                )
        _score_gpt(model, _blocks(tokens.astype(np.int64), geometry, limit), sums, rng)
    mean = sums.loss / sums.count
    return Score(mean, perplexity(mean), sums.right / sums.count, sums.count, sums.count == whole)


def relative_difference(loss: float, reported_perplexity: float) -> float:
    """How far a graded mean loss is from the one a reported (finite, positive) perplexity
    implies, as a share of the latter: what the master's verdict and `mlbench evaluate`
    hold against the tolerance."""
    said = math.log(reported_perplexity)
    return abs(loss - said) / max(abs(said), 1e-12)


RECORDED = ("valid_tokens", "vocab")  # what a grade needs of a run's summary config
GEOMETRY = ("bptt", "eval_columns", "block")


def run_record(
    task: str, summary: dict[str, Any], seed: int, workers: int, dataset: str, data_dir: str
) -> dict[str, Any] | None:
    """`grade`'s keywords for a run of `task` from its summary (its number of workers and
    seed where it records them, else `workers` and `seed`); None when the summary does not
    record its evaluation (RECORDED and a geometry). Shared by the master and `mlbench
    evaluate`, so both repeat the same evaluation."""
    config = summary.get("config") if isinstance(summary.get("config"), dict) else {}
    if any(key not in config for key in RECORDED) or not any(k in config for k in GEOMETRY):
        return None
    return {
        "task": task,
        "workers": int(summary.get("num_workers") or workers),
        "dataset": dataset,
        "seed": int(summary.get("seed", seed)),
        "config": {k: config[k] for k in (*RECORDED, *GEOMETRY) if k in config},
        "data_dir": data_dir if dataset != token_streams.SYNTHETIC else "",
    }


def grade(
    data: bytes,
    *,
    task: str,
    workers: int,
    dataset: str,
    seed: int,
    config: dict[str, Any],
    data_dir: str = "",
    max_tokens: int | None = None,
    probe_seed: int = 0,
    threads: int = THREADS,
) -> Score:
    """The grade of a run's ONNX model `data` from what the run records: its task, number
    of workers, data set and seed, and its summary's `config` (``valid_tokens``, ``vocab``
    and the geometry); `data_dir` holds WikiText-2's archive for a real-data run.
    ModelRefused, ValueError (also for a record that lacks an entry) or LabelsUnavailable
    as the parts raise them."""
    try:
        geometry = Geometry.of_run(task, workers, config)
        stream = token_streams.TokenStream(
            dataset, seed, int(config["valid_tokens"]), int(config["vocab"]), "valid", data_dir
        )
    except KeyError as exc:
        raise ValueError(f"the run's config does not record {exc.args[0]!r}") from None
    model = LanguageModel(data, geometry.family, stream.vocab, threads)
    return score(
        model,
        token_streams.tokens(stream),
        geometry,
        max_tokens=max_tokens,
        probe_seed=probe_seed,
    )
