"""Task 4b's final model in ONNX, as the evaluator audits it against the hypotheses the run
posted (shared/evaluation/translation_audit.py; the contract: docs/checking.rst, "Task 4b:
the translation model").

The contract: inputs ``source`` (int64 N x S: the source's pieces then EOS, padding after)
and ``target_in`` (int64 N x T: BOS then the pieces, padding after), output ``logits``
(float32 N x T x V), teacher forced: ``logits[n, t]`` scores the piece after
``target_in[n, :t + 1]``. N, S and T are dynamic. The run's SentencePiece model travels
inside the file, base64 in the ONNX metadata under translation_audit.VOCABULARY_KEY, so the
evaluator maps the sources it holds and the pieces the run posted to this model's ids.

Exported in evaluation mode (no dropout), inside the algorithm's evaluation context (the
caller's, torch_export.export_final), the weights the last evaluation decoded with.

Why the dynamo exporter (``dynamo=True`` with ``dynamic_shapes``), unlike task 3's and the
image tasks' TorchScript exporter: the TorchScript one cannot export torch's encoder layer
in evaluation mode (``aten::_transformer_encoder_layer_fwd``, its fused fast path, has no
ONNX form) and, with that fast path turned off, freezes the traced shapes into the
attention's Reshape nodes, so the model fails at any other batch or length (measured with
torch 2.13: the legacy export runs only at its traced shapes; the dynamo export runs at
other N, S and T within 1.5e-6 of torch's logits). The fast path is turned off while
exporting either way: it is an inference shortcut with the same arithmetic, and
torch.export traces the plain layers. The cost: the dynamo exporter and its onnxscript
dependency, and some 35 s of CPU for the small model on this project's busy machines
(after the benchmark clock stopped).
"""

from __future__ import annotations

import base64
import contextlib
import io
import warnings

import torch

from mlbench_worker.models.transformer_mt import TransformerMT
from mlbench_worker.shared.evaluation.translation_audit import VOCABULARY_KEY

SOURCE, TARGET_IN, LOGITS = "source", "target_in", "logits"
EXAMPLE = (2, 5, 4)  # the traced batch, source and target lengths; any others work as well


class TeacherForced(torch.nn.Module):
    """The model behind the contract: source and decoder input ids in, float32 logits out."""

    def __init__(self, model: TransformerMT) -> None:
        super().__init__()
        self.model = model

    def forward(self, source: torch.Tensor, target_in: torch.Tensor) -> torch.Tensor:
        return self.model(source, target_in).float()


@contextlib.contextmanager
def _plain_attention():
    """torch's fused fast path of the encoder layer off (see the module's docstring)."""
    was = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(was)


def onnx_bytes(model: TransformerMT, vocabulary: bytes) -> bytes:
    """`model` in evaluation mode as an ONNX model of the contract, carrying `vocabulary`
    (the run's serialized SentencePiece model); the model's own mode is restored after."""
    was_training = model.training
    module = TeacherForced(model).eval()
    device = next(model.parameters()).device
    n, s, t = EXAMPLE
    source = torch.full((n, s), 4, dtype=torch.int64, device=device)
    target_in = torch.full((n, t), 4, dtype=torch.int64, device=device)
    batch = torch.export.Dim("batch")
    shapes = {
        SOURCE: {0: batch, 1: torch.export.Dim("source")},
        TARGET_IN: {0: batch, 1: torch.export.Dim("target")},
    }
    try:
        with warnings.catch_warnings(), torch.no_grad(), _plain_attention():
            warnings.simplefilter("ignore")
            with contextlib.redirect_stdout(io.StringIO()):  # the exporter's progress lines
                program = torch.onnx.export(
                    module,
                    (source, target_in),
                    dynamo=True,
                    input_names=[SOURCE, TARGET_IN],
                    output_names=[LOGITS],
                    dynamic_shapes=shapes,
                    verbose=False,
                )
    finally:
        model.train(was_training)
    proto = program.model_proto
    proto.metadata_props.add(key=VOCABULARY_KEY, value=base64.b64encode(vocabulary).decode())
    return proto.SerializeToString()
