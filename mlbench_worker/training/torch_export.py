"""The final model of a reference or torch-ddp run, exported to ONNX for the evaluator's audit
(shared/evaluation/model_audit.py; the contract: docs/checking.rst, "The model format").

Once, after the last evaluation (whose predictions file is the one audited), every rank
enters the algorithm's evaluation context (the replicas' average, for algorithms whose
replicas differ: the model that was evaluated) and rank 0 exports it. The exported graph
takes the RAW test inputs, as the evaluator holds them: for the image tasks the run's own
normalisation ((x/255 - mean) / std, the test batches' `normalize`) is wrapped around the
model, so the evaluator needs no statistics of the run; task 2's linear model takes its rows
as they are, through the module its class offers for export (`export_module`: the same
scores in operators the exporter has, while training keeps its own fused forward). The
batch dimension is dynamic. The model goes with the arithmetic its evaluation used
(`precision_of`: bf16 or fp16 under --amp, tf32 where CUDA's tensor cores were allowed,
else fp32), which sets the audit's tolerance of near-ties.

Why torch's TorchScript-based exporter (``dynamo=False``) and not the dynamo one: for these
models (ResNets, the linear model: no data-dependent shapes, no attention) both give the
same scores (within 2.4e-7 here), but it exported ResNet-20 in 0.3 s where the dynamo
exporter took 7.5 s on this project's 2-core machines, and it needs only the `onnx`
package, not onnxscript as well. torch 2.13 warns that it is deprecated; the warning is
silenced, and the day it is gone the dynamo exporter (``dynamo=True`` with
``dynamic_shapes``) replaces it here, nowhere else.

A model that does not export is said in the run's log and not posted: the run stays graded
by its predictions, and its audit says "no model" (prediction_sink.PredictionSink.submit_model).
The bytes are the trainer's `final_onnx` (Trainer's: this module's export); a task-3
trainer overrides it with its own contract (tasks/wikitext2/export.py: tokens in, logits
out) and posts no predictions: the evaluator grades that model's perplexity
(mlbench_master/grading/perplexity_audit.py). Task 1b's model takes the S x S crops of its run
(`--crop`, 224 by default) fixed in its input, batch aside: the evaluator reads S from it.
A ResNet-50 is about 100 MB in float32.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mlbench_worker.training.prediction_sink import PredictionSink

OPSET = 17


class RawInputs(torch.nn.Module):
    """`model` behind the run's normalisation: raw 0..255 pixels in, the model's scores out."""

    def __init__(self, model: torch.nn.Module, scale: torch.Tensor, shift: torch.Tensor) -> None:
        super().__init__()
        self.model = model
        self.register_buffer("scale", scale.detach().float().reshape(1, -1, 1, 1))
        self.register_buffer("shift", shift.detach().float().reshape(1, -1, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x * self.scale + self.shift).float()


def exportable(model: torch.nn.Module, test_data: Any) -> tuple[torch.nn.Module, torch.Tensor]:
    """The module the contract describes for a run's `model` and its test batches, and an
    example input of two rows (zeros; only its shape matters)."""
    x, _ = next(iter(test_data.iterate(np.arange(1))))
    example = torch.zeros((2, *x.shape[1:]), dtype=torch.float32, device=x.device)
    if hasattr(model, "export_module"):
        model = model.export_module()
    normalize = getattr(test_data, "normalize", None)
    if normalize is None:
        return model, example  # task 2: the rows themselves
    return RawInputs(model, normalize.scale, normalize.shift).to(x.device), example


def onnx_bytes(module: torch.nn.Module, example: torch.Tensor) -> bytes:
    """`module` as an ONNX model whose input 0 has a dynamic batch dimension."""
    was_training = module.training
    module.eval()
    buffer = io.BytesIO()
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                module,
                (example,),
                buffer,
                dynamo=False,
                opset_version=OPSET,
                input_names=["inputs"],
                output_names=["scores"],
                dynamic_axes={"inputs": {0: "batch"}, "scores": {0: "batch"}},
            )
    finally:
        module.train(was_training)
    return buffer.getvalue()


def precision_of(trainer: Any) -> str:
    """The arithmetic of the trainer's evaluation (the model contract's `precision`)."""
    dtype = getattr(trainer, "amp_dtype", None)
    if dtype is not None:
        return {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, "fp32")
    device = trainer.device
    if device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 8:
        # Ampere and later: convolutions (cudnn) and, when allowed, matrix products run
        # in TF32 unless turned off; torch allows it for convolutions by default.
        if torch.backends.cudnn.allow_tf32 or torch.backends.cuda.matmul.allow_tf32:
            return "tf32"
    return "fp32"


def export_final(trainer: Any, sink: PredictionSink | None) -> Path | None:
    """Every rank, after training: rank 0 exports the evaluated final model and hands it to
    the sink (which writes and posts it); the file kept, or None."""
    if sink is None or not sink.enabled:
        return None
    evaluation = getattr(trainer.allreduce, "evaluation", contextlib.nullcontext)
    with evaluation():
        if trainer.comm.rank != 0:
            return None

        def write(path: Path) -> None:
            path.write_bytes(trainer.final_onnx())  # task 3's trainers: their own contract

        return sink.submit_model(write, precision_of(trainer))
