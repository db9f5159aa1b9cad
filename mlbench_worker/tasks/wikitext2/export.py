"""Task 3's model in ONNX, as the evaluator runs it to grade the perplexity itself
(shared/evaluation/perplexity.py; the contract: docs/checking.rst, "Task 3: perplexity from
the model").

The contract, one layout for both families (batch first, as the evaluator holds its columns
and blocks), every dimension named here dynamic:

- the GPT (task 3b): input 0 ``tokens``, int64 N x T (T up to the model's context); output 0
  ``logits``, float32 N x T x V, where ``logits[n, t]`` scores the token that follows
  ``tokens[n, t]`` from ``tokens[n, :t + 1]`` alone;
- the AWD-LSTM (task 3a): inputs ``tokens`` (int64 N x T) and ``state`` (float32 N x S);
  outputs ``logits`` (float32 N x T x V) and ``next_state`` (float32 N x S), the state after
  the T tokens. A column starts from zeros; feeding ``next_state`` back with the next
  tokens continues the column, so the evaluator carries the state down its columns window
  by window as the run's evaluation does. S is fixed by the model: the (h, c) of each
  layer, in order, side by side (2 x (1150 + 1150 + 400) = 5,400 for the task's model).

Logits, not log-probabilities: the evaluator normalises them itself (a model that gave
"log-probabilities" that do not sum to one would otherwise choose its own perplexity).

The model is exported in evaluation mode (no dropout, no weight drop: the weights the run
evaluates), with the AWD-LSTM's averaged weights once averaged SGD has started
(`evaluated_onnx` enters the contexts the trainer's evaluation enters).

Why torch's TorchScript-based exporter (``dynamo=False``) for both: it is exact for both at
any batch and length (within 1e-6 of the logits' size here) and takes 2 to 4 s for the
task-size models, where the dynamo exporter took 10 s for the tiny GPT (exact too) and
cannot export the AWD-LSTM with a dynamic length: torch.export specialises the length of
``aten.lstm`` to the traced one ("You marked time as dynamic but your code specialized it
to be a constant"), the exporter carries on with that length in the graph's shapes, and
its optimiser folds it into the Reshape after each ONNX LSTM, which then fails at any other
length. The day the TorchScript
exporter is gone, the GPT switches as it is (``dynamo=True`` with ``dynamic_shapes``) and
the LSTM needs that fixed first. docs/results.rst has the measurements.

The LSTM "0.058 off" found by hand (docs/results.rst) was not the export's error: the
comparison's torch side ran in training mode. ``torch.onnx.export`` puts the module it is
given back into that module's own mode afterwards, recursively; the wrapper that made the
zero states was a new module, in training mode, so exporting it switched the evaluated
model to training, and torch's reference logits had dropout and weight drop in them. The
hand-run script was not kept; this comparison rebuilt as it is described (tokens in, zero
states made inside, torch's logits taken after the export) is off by 0.06 to 0.08 on the
tiny model, and by 3e-8 with torch's side in evaluation mode, and the ONNX LSTM's first
layer is within 3e-8 of a float64 LSTM written out by hand. Here the wrapper is put in
evaluation mode before the export, and the model's own mode is restored after it.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from typing import Any

import torch

from mlbench_worker.models.awd_lstm import AWDLSTM
from mlbench_worker.models.gpt import GPT

OPSET = 17
TOKENS, STATE, LOGITS, NEXT_STATE = "tokens", "state", "logits", "next_state"
EXAMPLE = (2, 5)  # the traced batch and length; every other shape works as well
# Folding constants would store the tied embedding twice (once as the decoder's transposed
# copy): 187 MB instead of 134 for the AWD-LSTM, 81 instead of 47 for gpt-small, the same
# logits. onnxruntime folds them itself when it loads the model.
FOLDING = False


class RecurrentModel(torch.nn.Module):
    """The AWD-LSTM behind the contract: tokens N x T and the state N x S in, logits N x T x V
    and the next state out (the layers' (h, c) side by side, as `state_size` says)."""

    def __init__(self, model: AWDLSTM) -> None:
        super().__init__()
        self.model = model
        self.sizes = [int(s) for s in model.sizes[1:]]

    @property
    def state_size(self) -> int:
        return 2 * sum(self.sizes)

    def forward(self, tokens: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, ...]:
        hidden, at = [], 0
        for size in self.sizes:
            h = state[:, at : at + size].unsqueeze(0).contiguous()
            c = state[:, at + size : at + 2 * size].unsqueeze(0).contiguous()
            hidden.append((h, c))
            at += 2 * size
        logits, new, _, _ = self.model(tokens.t(), hidden)
        next_state = torch.cat([t.squeeze(0) for pair in new for t in pair], dim=1)
        return logits.transpose(0, 1).float(), next_state.float()


def exportable(model: torch.nn.Module) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...], dict]:
    """The module the contract describes for a task-3 model, example inputs of EXAMPLE's
    shape, and torch.onnx.export's names and dynamic axes for them."""
    device = next(model.parameters()).device
    tokens = torch.zeros(EXAMPLE, dtype=torch.int64, device=device)
    batch, time = {0: "batch"}, {0: "batch", 1: "time"}
    if isinstance(model, AWDLSTM):
        module = RecurrentModel(model)
        state = torch.zeros((EXAMPLE[0], module.state_size), device=device)
        names = {
            "input_names": [TOKENS, STATE],
            "output_names": [LOGITS, NEXT_STATE],
            "dynamic_axes": {TOKENS: time, STATE: batch, LOGITS: time, NEXT_STATE: batch},
        }
        return module, (tokens, state), names
    if isinstance(model, GPT):
        names = {
            "input_names": [TOKENS],
            "output_names": [LOGITS],
            "dynamic_axes": {TOKENS: time, LOGITS: time},
        }
        return model, (tokens,), names
    raise TypeError(f"no ONNX contract for a {type(model).__name__}: task 3's models only")


def onnx_bytes(model: torch.nn.Module) -> bytes:
    """`model` (an AWDLSTM or a GPT) in evaluation mode as an ONNX model of the contract; the
    model's own mode is restored afterwards."""
    was_training = model.training
    module, example, names = exportable(model)
    module.eval()
    buffer = io.BytesIO()
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # the exporter's deprecation notice
            torch.onnx.export(
                module,
                example,
                buffer,
                dynamo=False,
                opset_version=OPSET,
                do_constant_folding=FOLDING,
                **names,
            )
    finally:
        model.train(was_training)
    return buffer.getvalue()


def evaluated_onnx(trainer: Any) -> bytes | None:
    """Every rank: the model a task-3 trainer's evaluation runs, in ONNX, on rank 0 (None on
    the others): inside the algorithm's evaluation context (the replicas' average where
    they differ; every rank must enter it) and, for the AWD-LSTM, its averaged weights."""
    evaluation = getattr(trainer.allreduce, "evaluation", contextlib.nullcontext)
    with evaluation():
        if trainer.comm.rank != 0:
            return None
        return trainer.final_onnx()
