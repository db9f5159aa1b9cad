"""The final Keras model of a TensorFlow run, exported to ONNX for the evaluator's audit
(shared/evaluation/model_audit.py; the contract: docs/checking.rst, "The model format").

The contract's input is the reference's: raw pixel values 0..255, float32 N x 3 x 32 x 32
(channels first). This implementation keeps images NHWC and normalises them in numpy
(data.py), so the exported graph does both itself: a transpose to NHWC, then the run's own
(x/255 - mean) / std (the test batches' `scale` and `shift`), then the model in inference
mode (batch norm with its running statistics, as `evaluate` uses it).

With tf2onnx (``tf2onnx.convert.from_function``), which Keras 3's own ONNX export calls
anyway; tracing the function with a dynamic batch dimension makes the ONNX input's first
axis dynamic. Rank 0 exports after the last evaluation, whose batch-norm statistics were
averaged over the ranks (Steps.average_statistics), so the model exported is the one whose
predictions were graded. Reading the model's variables needs no collective, so the other
ranks do not take part. Its precision is float32 on the CPU (this implementation refuses
--amp) and TF32 on a GPU where TensorFlow allows it (its default on Ampere and later).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

OPSET = 17


def onnx_bytes(model: Any, scale: np.ndarray, shift: np.ndarray, side: int = 32) -> bytes:
    """`model` (NHWC, normalised inputs) behind the contract's raw NCHW input, as ONNX."""
    import tf2onnx

    spec = [tf.TensorSpec([None, 3, side, side], tf.float32, name="inputs")]
    # numpy arrays, made constants inside the function: a tensor made outside would be
    # captured as a further input of the graph.
    scale_a = np.asarray(scale, np.float32).reshape(1, 1, 1, -1)
    shift_a = np.asarray(shift, np.float32).reshape(1, 1, 1, -1)

    @tf.function(input_signature=spec)
    def raw(x: tf.Tensor) -> tf.Tensor:
        nhwc = tf.transpose(x, [0, 2, 3, 1]) * tf.constant(scale_a) + tf.constant(shift_a)
        return tf.cast(model(nhwc, training=False), tf.float32)

    proto, _ = tf2onnx.convert.from_function(raw, input_signature=spec, opset=OPSET)
    return proto.SerializeToString()


def export_final(trainer: Any) -> Path | None:
    """Rank 0 after training: the final model handed to the run's prediction sink (which
    writes and posts it); the file kept, or None."""
    sink = trainer.predictions
    if sink is None or not sink.enabled or trainer.control.rank != 0:
        return None
    data = trainer.test_data

    def write(path: Path) -> None:
        path.write_bytes(onnx_bytes(trainer.steps.model, data.scale, data.shift))

    return sink.submit_model(write, precision())


def precision() -> str:
    """The arithmetic of this process's evaluation: tf32 on a GPU with TensorFloat-32
    allowed, else fp32."""
    gpu = bool(tf.config.list_physical_devices("GPU"))
    return "tf32" if gpu and tf.config.experimental.tensor_float_32_execution_enabled() else "fp32"
