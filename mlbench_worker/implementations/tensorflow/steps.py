"""What runs inside TensorFlow: a training step in three tf.functions, and evaluation.

A training step is split where the reference loop splits its own (training/trainer.py: backward,
then the exchange, then the optimizer's step), and each part is one `tf.function` whose
`strategy.run` runs this rank's replica:

1. `compute`: forward and backward on this rank's batch; the loss is divided by the
   number of replicas K, so that summing the gradients gives their average (as the
   reference scales its loss by 1/K);
2. `all_reduce`: MultiWorkerMirroredStrategy's collective all-reduce (RING over gRPC on
   CPU, NCCL on GPU) of the gradients, with the step's loss, hits and image count and the
   stop and report flags riding along, as they ride in the reference's gradient buffer;
3. `apply`: SGD with momentum as torch.optim.SGD computes it.

Why three functions and not one (strategy.run of forward, backward and
optimizer.apply_gradients, as the Keras guides write it): inside one graph the all-reduce
cannot be timed, and the summary's communication share would have to be left empty. A
gradient all-reduce needs every gradient, and TensorFlow's collective launches it after
backward inside one graph too, so the split hides nothing that would otherwise overlap;
what it costs is two more function calls a step (measured on 2 CPU ranks of ResNet-20:
within 4 % of the images/s of one fused function). Each function is traced and run once
before the benchmark clock starts (`warm_up`).

Why SGD is written out instead of keras.optimizers.SGD: Keras keeps the learning rate
inside its velocity (v = m v - lr g; p += v) where torch keeps it outside (b = m b + g;
p -= lr b), which differ whenever the rate changes (every warm-up step), and Keras's
weight decay is decoupled where torch's (and ours) is an L2 term added to the gradient.
Keras's apply_gradients would also all-reduce the gradients a second time. Ten lines of
TensorFlow give torch's update exactly: g += wd p; b = m b + g; p -= lr b.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

IMAGES = tf.TensorSpec([None, 32, 32, 3], tf.float32)
LABELS = tf.TensorSpec([None], tf.int32)


class Steps:
    """The tf.functions of one run, for `model` (built in `strategy`'s scope)."""

    def __init__(
        self,
        strategy: tf.distribute.Strategy,
        model: Any,
        momentum: float,
        weight_decay: float,
    ) -> None:
        self.strategy = strategy
        self.model = model
        self.replicas = strategy.num_replicas_in_sync
        self.momentum = momentum
        self.weight_decay = weight_decay
        self.params = list(model.trainable_variables)
        self.stats = list(model.non_trainable_variables)  # batch norm's running statistics
        with strategy.scope():
            self.buffers = [
                tf.Variable(tf.zeros(p.shape, p.dtype), trainable=False, name="momentum")
                for p in self.params
            ]
        self.compute = tf.function(self._compute, input_signature=[IMAGES, LABELS])
        self.all_reduce = tf.function(self._all_reduce, reduce_retracing=True)
        self.apply = tf.function(self._apply, reduce_retracing=True)
        self.evaluate_batch = tf.function(self._evaluate_batch, input_signature=[IMAGES, LABELS])
        self.average_statistics = tf.function(self._average_statistics)

    def warm_up(self) -> None:
        """Trace every function and run it once on zeros, before the benchmark clock.

        TensorFlow builds a graph when a function is first called and optimises it when it
        first runs it (seconds each for ResNet-20, and the ranks' first collective agrees
        on its group): set-up, like building the model, not training. What the warm-up
        changed is put back: batch norm's running statistics (its forward pass ran in
        training mode) and the momentum buffers (its SGD update ran at rate 0, so the
        weights did not move).
        """
        saved = [v.numpy() for v in self.stats]
        zeros = tf.zeros([2, 32, 32, 3], tf.float32)
        grads, stats = self.compute(zeros, tf.zeros([2], tf.int32))
        *summed, _ = self.all_reduce([*grads, tf.zeros([5], tf.float32)])
        self.apply(summed, tf.constant(0.0, tf.float32)).numpy()
        self.evaluate_batch(zeros, tf.zeros([2], tf.int32))[0].numpy()
        self.all_reduce([tf.zeros([3], tf.float32)])[0].numpy()  # evaluation's sums
        self.average_statistics().numpy()
        for v, value in zip(self.stats, saved, strict=True):
            v.assign(value)
        for b in self.buffers:
            b.assign(tf.zeros(b.shape, b.dtype))

    # --- the training step ------------------------------------------------------------
    def _compute(self, x: tf.Tensor, y: tf.Tensor) -> Any:
        return self.strategy.run(self._replica_compute, args=(x, y))

    def _replica_compute(self, x: tf.Tensor, y: tf.Tensor) -> tuple[list, tf.Tensor]:
        with tf.GradientTape() as tape:
            logits = self.model(x, training=True)
            loss = tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
            )
            scaled = loss / self.replicas
        grads = tape.gradient(scaled, self.params)
        n = tf.cast(tf.shape(y)[0], tf.float32)
        with tf.control_dependencies(grads):  # ready means backward is done, on GPU too
            stats = tf.stack([loss * n, _hits(logits, y)])
        return grads, stats

    def _all_reduce(self, values: list) -> Any:
        return self.strategy.run(_replica_sum, args=(values,))

    def _apply(self, grads: list, lr: tf.Tensor) -> Any:
        return self.strategy.run(self._replica_apply, args=(grads, lr))

    def _replica_apply(self, grads: list, lr: tf.Tensor) -> tf.Tensor:
        for p, b, g in zip(self.params, self.buffers, grads, strict=True):
            g = g + self.weight_decay * p
            b.assign(self.momentum * b + g)
            p.assign_sub(lr * b)
        return tf.reduce_sum(self.params[-1])  # read after the updates: waits for them

    # --- evaluation ---------------------------------------------------------------------
    def _evaluate_batch(self, x: tf.Tensor, y: tf.Tensor) -> Any:
        return self.strategy.run(self._replica_evaluate, args=(x, y))

    def _replica_evaluate(self, x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """The batch's loss sum, hits and size, and its predicted classes (the argmax the
        hits count: the evaluator grades exactly what was counted)."""
        logits = self.model(x, training=False)
        loss = tf.reduce_sum(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
        )
        predicted = tf.argmax(logits, axis=1, output_type=tf.int32)
        hits = tf.reduce_sum(tf.cast(tf.equal(predicted, y), tf.float32))
        return tf.stack([loss, hits, tf.cast(tf.shape(y)[0], tf.float32)]), predicted

    def _average_statistics(self) -> Any:
        return self.strategy.run(self._replica_average)

    def _replica_average(self) -> tf.Tensor:
        """Every rank's batch-norm running statistics replaced by their mean over ranks (the
        reference's average_buffers before it evaluates): each rank keeps its own while
        training, as Keras's BatchNormalization does under the strategy."""
        ctx = tf.distribute.get_replica_context()
        means = ctx.all_reduce(
            tf.distribute.ReduceOp.SUM, [tf.identity(v) / self.replicas for v in self.stats]
        )
        for v, mean in zip(self.stats, means, strict=True):
            v.assign(mean)
        return tf.reduce_sum(self.stats[-1])


def _replica_sum(values: list) -> list:
    """Sum over all ranks; tf.identity places the inputs on this replica's device, which
    the collective needs to know where its result goes."""
    ctx = tf.distribute.get_replica_context()
    return ctx.all_reduce(tf.distribute.ReduceOp.SUM, [tf.identity(v) for v in values])


def _hits(logits: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
    predicted = tf.argmax(logits, axis=1, output_type=tf.int32)
    return tf.reduce_sum(tf.cast(tf.equal(predicted, y), tf.float32))
