"""A task-3 model in ONNX as the evaluator runs it: the contract checked, the forward pass,
and the probe that a model looks only at the tokens before the one it predicts.

The contract (docs/checking.rst, "Task 3: perplexity from the model"; the task's exporter is
tasks/wikitext2/export.py), one self-contained ONNX file, batch first:

- ``gpt`` (task 3b): input 0, int64 N x T tokens; output 0, float N x T x V logits, where
  ``logits[n, t]`` scores the token after ``tokens[n, t]``;
- ``lstm`` (task 3a): inputs 0 and 1, int64 N x T tokens and float32 N x S state; outputs 0
  and 1, float N x T x V logits and float32 N x S next state; S is fixed by the model, zeros
  start a column and the next state continues it.

N and T dynamic; V the stream's vocabulary. Logits, which the evaluator normalises itself
(perplexity.py), so a model cannot choose its own normalisation.

A model that looks ahead (the logits at t using the token at t + 1, which the input holds)
would score a perplexity near 1; the probe (`causal_probe`) runs a few of the evaluation's
own windows again with, at PROBE_POSITIONS positions t of each, every token after t
replaced by random ones, and refuses a model whose logits at t change beyond rounding. A
model that looks ahead everywhere is caught at once; one that looked ahead only on inputs
the probe does not draw (rarely, or on tokens it recognises) is not ruled out, which limits
what it can gain but is no proof.

Refusals are model_audit.ModelRefused (a ValueError), the audit's, with a message naming the
problem: not ONNX, external data, the wrong inputs or outputs, another vocabulary, a fixed
batch or length, a failing run, NaN or infinite outputs, a look ahead. numpy and onnxruntime
only (tests/test_worker_rooms.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mlbench_worker.shared.evaluation.model_audit import ModelRefused, first_line, onnx_session

LSTM, GPT = "lstm", "gpt"
FAMILIES = (LSTM, GPT)
THREADS = 1
TRIAL = (3, 4)  # a shape the exporters do not trace with (they use 2 rows)
CAUSAL_TOLERANCE = 1e-4  # of the logits' size (at least 1): rounding, not a look ahead
PROBE_POSITIONS = 16  # positions of each probed window
LOGITS_PER_RUN = 1 << 23  # at most this many logits a forward pass (32 MiB of float32)

__all__ = ["FAMILIES", "GPT", "LSTM", "LanguageModel", "ModelRefused", "causal_probe"]


def _dims(shape: Any) -> list:
    return list(shape) if shape is not None else []


def describe(family: str) -> str:
    """The contract of `family` in one line (for messages)."""
    if family == LSTM:
        return (
            "int64 N x T tokens and float32 N x S state in, float N x T x V logits and "
            "float32 N x S next state out"
        )
    return "int64 N x T tokens in, float N x T x V logits out"


class LanguageModel:
    """A loaded ONNX model that fits task 3's contract for `family` and a vocabulary of
    `vocab` words (checked when it is made, on a trial input)."""

    def __init__(self, data: bytes, family: str, vocab: int, threads: int = THREADS) -> None:
        if family not in FAMILIES:
            raise ValueError(f"model family {family!r} is not one of {', '.join(FAMILIES)}")
        self.family, self.vocab = family, vocab
        self.session = onnx_session(data, threads)
        self.state_size = self._check_signature()
        tokens = np.zeros(TRIAL, dtype=np.int64)
        self.run(tokens, self.zero_state(TRIAL[0]))

    @property
    def recurrent(self) -> bool:
        return self.family == LSTM

    def _check_signature(self) -> int:
        """The state size S (0 for the GPT), after checking the inputs' and outputs' count,
        types and fixed dimensions against the contract."""
        inputs, outputs = self.session.get_inputs(), self.session.get_outputs()
        want = 2 if self.recurrent else 1
        if len(inputs) != want or len(outputs) != want:
            raise ModelRefused(
                f"the model takes {len(inputs)} inputs and gives {len(outputs)} outputs; "
                f"task 3's {self.family} contract is {describe(self.family)}"
            )
        self.names = [i.name for i in inputs]
        tokens = inputs[0]
        if tokens.type != "tensor(int64)" or len(_dims(tokens.shape)) != 2:
            raise ModelRefused(
                f"the model's input 0 is {tokens.type} of shape {_dims(tokens.shape)}; the "
                "contract's is int64 N x T tokens"
            )
        for axis, what in enumerate(("batch", "length")):
            dim = _dims(tokens.shape)[axis]
            if isinstance(dim, int) and dim > 0:
                raise ModelRefused(
                    f"the model's {what} is fixed at {dim}; the contract needs it dynamic "
                    "(export with dynamic axes)"
                )
        logits = outputs[0]
        if logits.type not in ("tensor(float)", "tensor(double)") or len(_dims(logits.shape)) != 3:
            raise ModelRefused(
                f"the model's output 0 is {logits.type} of shape {_dims(logits.shape)}; the "
                "contract's is float N x T x V logits"
            )
        words = _dims(logits.shape)[2]
        if isinstance(words, int) and words != self.vocab:
            raise ModelRefused(
                f"the model scores {words} words; the stream's vocabulary has {self.vocab}"
            )
        if not self.recurrent:
            return 0
        state, state_out = inputs[1], outputs[1]
        size = _dims(state.shape)[1:2]
        if (
            state.type != "tensor(float)"
            or len(_dims(state.shape)) != 2
            or not isinstance(size[0], int)
            or size[0] < 1
        ):
            raise ModelRefused(
                f"the model's input 1 is {state.type} of shape {_dims(state.shape)}; the "
                "contract's is float32 N x S state with S fixed"
            )
        if state_out.type != "tensor(float)":
            raise ModelRefused(f"the model's output 1 is {state_out.type}, not float32 state")
        return size[0]

    def zero_state(self, rows: int) -> np.ndarray | None:
        """The state a column starts from (None for the GPT)."""
        return np.zeros((rows, self.state_size), np.float32) if self.recurrent else None

    def run(
        self, tokens: np.ndarray, state: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """The logits (float32 N x T x V) of `tokens` (N x T), and for the LSTM the next
        state; ModelRefused when the model fails or gives outputs off the contract."""
        n, t = tokens.shape
        feed = {self.names[0]: np.ascontiguousarray(tokens, dtype=np.int64)}
        if self.recurrent:
            feed[self.names[1]] = np.ascontiguousarray(state, dtype=np.float32)
        try:
            out = self.session.run(None, feed)
        except Exception as exc:
            raise ModelRefused(
                f"the model fails on {n} x {t} tokens ({describe(self.family)}): {first_line(exc)}"
            ) from None
        logits = np.asarray(out[0])
        if logits.shape != (n, t, self.vocab):
            raise ModelRefused(
                f"the model gives logits of shape {' x '.join(map(str, logits.shape))} for "
                f"{n} x {t} tokens; the contract is N x T x {self.vocab} (the stream's "
                "vocabulary)"
            )
        if not np.isfinite(logits).all():
            raise ModelRefused("the model gives NaN or infinite logits")
        if not self.recurrent:
            return logits.astype(np.float32, copy=False), None
        next_state = np.asarray(out[1])
        if next_state.shape != (n, self.state_size):
            raise ModelRefused(
                f"the model gives a next state of shape {next_state.shape} for {n} rows; the "
                f"contract is N x {self.state_size}, the shape of its state input"
            )
        if not np.isfinite(next_state).all():
            raise ModelRefused("the model gives a NaN or infinite state")
        return logits.astype(np.float32, copy=False), next_state


def causal_probe(
    model: LanguageModel,
    windows: list[tuple[np.ndarray, np.ndarray | None]],
    rng: np.random.Generator,
    positions: int = PROBE_POSITIONS,
) -> None:
    """Refuse (ModelRefused) a model whose logits at a position t of one of `windows`
    (tokens T, and the state before them for the LSTM) change when every token after t is
    replaced by a random one; `positions` positions of each window are drawn with `rng`
    (all of them in a shorter window), each a copy of the window perturbed after it, run in
    batches of at most LOGITS_PER_RUN logits."""
    for tokens, state in windows:
        t = tokens.shape[0]
        if t < 2:
            continue
        chosen = np.sort(rng.choice(t - 1, min(positions, t - 1), replace=False))
        base, _ = model.run(tokens[None], None if state is None else state[None])
        scale = max(1.0, float(np.abs(base).max()))
        per_run = max(1, LOGITS_PER_RUN // (t * model.vocab))
        for start in range(0, chosen.size, per_run):
            at = chosen[start : start + per_run]
            copies = np.repeat(tokens[None], at.size, axis=0)
            after = np.arange(t)[None, :] > at[:, None]
            copies[after] = rng.integers(model.vocab, size=int(after.sum()))
            states = None if state is None else np.repeat(state[None], at.size, axis=0)
            probed, _ = model.run(copies, states)
            moved = np.abs(probed[np.arange(at.size), at] - base[0, at]).max(axis=1)
            worst = int(moved.argmax())
            if moved[worst] > CAUSAL_TOLERANCE * scale:
                raise ModelRefused(
                    f"the model looks ahead: its logits at position {at[worst]} of a "
                    f"{t}-token window change by {moved[worst]:.3g} when only the tokens "
                    "after it change; a language model's scores at t may use the tokens up "
                    "to t only"
                )
