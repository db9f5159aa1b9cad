"""The CIFAR ResNets of mlbench_worker/models/resnet_cifar.py, layer for layer, in Keras.

The framework comparison means something only if both frameworks train the same network,
so everything that decides what is learned is copied, not approximated:

- depth 6n+2: a 3x3 stem of 16 filters, three stages of n basic blocks (16, 32, 64
  filters; the first block of the last two stages halves the resolution), global average
  pooling and one dense layer; convolutions without bias; ResNet-20 has 269,722 trainable
  parameters, as ours (tested, and for 32, 44 and 56);
- the basic block conv-BN-ReLU-conv-BN, plus the shortcut, then ReLU; the shortcut that
  changes shape is "option A" (every second pixel, new channels zero-padded half in front,
  half behind), so it has no parameters;
- a stride-2 convolution pads one pixel on every side, as torch's `padding=1` does. Keras's
  `padding="same"` would pad only at the bottom and right for an even input, so that the
  output pixel i would be centred on input pixel 2i+1 instead of 2i, out of line with the
  shortcut's pixel 2i: explicit ZeroPadding2D and a "valid" convolution instead;
- initialisation: He normal with fan-out for the convolutions (torch's
  `kaiming_normal_(mode="fan_out", nonlinearity="relu")`: an untruncated normal of variance
  2/fan-out), batch norm as identity, and torch's default for the linear layer (weights and
  bias uniform in +-1/sqrt(fan-in));
- batch norm with torch's settings: epsilon 1e-5, running statistics updated with momentum
  0.1 (Keras counts the other way: momentum 0.9), statistics of this rank's batch in
  training (not synchronised across ranks, as ours).

What differs and cannot be made equal: the random draws of the initialisation (both seeded
by --seed, by different generators), and torch's running variance uses the unbiased batch
variance where Keras's uses the biased one (a factor of 128/127 at batch 128).
"""

from __future__ import annotations

import math
from typing import Any

from tensorflow import keras

from mlbench_worker.models import MODELS

BN_EPSILON = 1e-5
BN_MOMENTUM = 0.9  # Keras's: the running statistics keep 0.9 of themselves (torch's 0.1)


def conv_init() -> keras.initializers.Initializer:
    """torch's kaiming_normal_(mode="fan_out", nonlinearity="relu")."""
    return keras.initializers.VarianceScaling(2.0, "fan_out", "untruncated_normal")


class ShortcutA(keras.layers.Layer):
    """Parameter-free shortcut: subsample by the stride, zero-pad the extra channels."""

    def __init__(self, pad: int, stride: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pad, self.stride = pad, stride

    def call(self, x: Any) -> Any:
        if self.stride > 1:
            x = x[:, :: self.stride, :: self.stride, :]
        half = self.pad // 2
        return keras.ops.pad(x, [[0, 0], [0, 0], [0, 0], [half, self.pad - half]])


def _conv3x3(x: Any, filters: int, stride: int, name: str) -> Any:
    if stride > 1:  # torch's padding=1 on both sides (see the module docstring)
        x = keras.layers.ZeroPadding2D(1, name=f"{name}_pad")(x)
    return keras.layers.Conv2D(
        filters,
        3,
        strides=stride,
        padding="valid" if stride > 1 else "same",
        use_bias=False,
        kernel_initializer=conv_init(),
        name=name,
    )(x)


def _bn(x: Any, name: str) -> Any:
    return keras.layers.BatchNormalization(momentum=BN_MOMENTUM, epsilon=BN_EPSILON, name=name)(x)


def _basic_block(x: Any, cin: int, cout: int, stride: int, name: str) -> Any:
    """conv-BN-ReLU-conv-BN, plus the shortcut, then ReLU (the original ordering)."""
    out = keras.layers.ReLU()(_bn(_conv3x3(x, cout, stride, f"{name}_conv1"), f"{name}_bn1"))
    out = _bn(_conv3x3(out, cout, 1, f"{name}_conv2"), f"{name}_bn2")
    shortcut = x
    if stride != 1 or cin != cout:
        shortcut = ShortcutA(cout - cin, stride, name=f"{name}_shortcut")(x)
    return keras.layers.ReLU()(keras.layers.Add()([out, shortcut]))


def resnet(depth: int, num_classes: int = 10) -> keras.Model:
    """The original CIFAR ResNet of `depth` (6n+2), for NHWC 32x32x3 float inputs."""
    if (depth - 2) % 6 != 0 or depth < 8:
        raise ValueError(f"CIFAR ResNet depth must be 6n+2 (20, 32, 44, 56, ...), got {depth}")
    n = (depth - 2) // 6
    inputs = keras.Input((32, 32, 3), name="images")
    x = keras.layers.ReLU()(_bn(_conv3x3(inputs, 16, 1, "conv1"), "bn1"))
    cin = 16
    for stage, width in enumerate((16, 32, 64)):
        for i in range(n):
            stride = 2 if stage > 0 and i == 0 else 1
            x = _basic_block(x, cin, width, stride, f"stage{stage + 1}_block{i + 1}")
            cin = width
    x = keras.layers.GlobalAveragePooling2D()(x)
    bound = 1.0 / math.sqrt(cin)  # torch's nn.Linear: uniform in +-1/sqrt(fan-in)
    logits = keras.layers.Dense(
        num_classes,
        kernel_initializer=keras.initializers.RandomUniform(-bound, bound),
        bias_initializer=keras.initializers.RandomUniform(-bound, bound),
        name="fc",
    )(x)
    return keras.Model(inputs, logits, name=f"resnet{depth}")


def build_model(name: str, num_classes: int = 10) -> keras.Model:
    """The Keras twin of models.build_model(name), for the original ResNets (the
    pre-activation ones are the torch implementations' only)."""
    builder, depth = MODELS[name]
    if builder != "resnet":
        raise ValueError(f"no Keras model {name!r}: only the original ResNets have one")
    return resnet(depth, num_classes)
