"""The one module of mlbench a training algorithm written outside mlbench may import.

Why one module: everything else in mlbench_worker may change at any release; what is here
changes only with API_VERSION, so an algorithm written for version 1 keeps running, or is
refused at start-up with the version it needs (docs/algorithms.rst tells the whole contract).

An algorithm module declares, at its top level and as literals (the master reads them from
the file without running it):

    from mlbench_worker.algorithms.public import Algorithm, Option

    NAME = "randk"                      # how runs and pages name it
    API = 1                             # the API_VERSION it was written for
    OPTIONS = (Option("density", "float", 0.01, "fraction sent", above=0, maximum=1),)

    class RandK(Algorithm):
        def __init__(self, parts, options): ...   # options: typed, defaults filled in
        def finish(self) -> float: ...            # combine the ranks' gradients

What the loop calls and what each call must do is `Algorithm`'s docstring. The algorithm
talks to the other ranks through `self.wire` only (`Wire`: allreduce_, allgather,
exchange): the trainer makes that wire, counts every byte handed to it, and reports its own
count as the run's `comm_bytes`, whatever the algorithm says.
"""

from __future__ import annotations

import contextlib

from mlbench_worker.algorithms.interface import Exchange, ModelVector, Parts, averaged_models
from mlbench_worker.algorithms.wire import Wire
from mlbench_worker.shared.algorithm_catalogue import Option

API_VERSION = 1

__all__ = ["API_VERSION", "Algorithm", "ModelVector", "Option", "Parts", "Wire"]


class Algorithm(Exchange):
    """The base of every training algorithm; the loop calls, on every rank, each step:

    1. ``begin()`` before forward: zeroes the gradient buffer (an override must call
       ``super().begin()`` first);
    2. backward writes this rank's gradient times ``grad_scale`` (default 1/ranks, so a sum
       over ranks is the mean; set 1.0 when each rank steps on its own gradient) into
       ``self.grads.grads``, one flat fp32 vector of every parameter's gradient; the
       trainer's scalar slots (loss, counts, stop flags) are ``self.grads.extra``;
    3. ``finish() -> float`` (required): on return ``self.grads.extra`` holds its sum over
       all ranks (call ``self.sum_scalars()``, or carry it in your own message) and
       ``self.grads.grads`` what the optimizer applies on this rank. Return the seconds of
       communication hidden behind backward (0.0). This step's learning rate is already in
       ``self.parts.optimizer.param_groups``;
    4. ``step(optimizer)``: ``optimizer.step()`` by default; override to apply an update of
       your own;
    5. ``after_step(step)`` with ``step`` the 1-based count of steps done (model averaging).

    Around each evaluation the loop enters ``evaluation()``: nothing when ``centralized``
    (every rank holds the same model after each step); with ``centralized = False`` the
    ranks' models are averaged for the evaluation and restored after it. ``describe()`` is
    the line the run's headline shows; ``remove()`` undoes hooks when the algorithm is
    replaced. ``claimed_bytes`` (optional int property): bytes per step the algorithm
    expects to send; the run reports it beside the measured count, never instead of it.

    What an algorithm has: ``self.parts.model``, ``self.grads``, ``self.wire`` (the counted
    communicator), ``self.comm.rank`` and ``self.comm.size`` (who it is, how many ranks),
    ``self.parts.seed`` (the run's seed, the same on every rank) and
    ``self.parts.optimizer``; ``self.options`` are the declared options, typed.
    """

    def evaluation(self) -> contextlib.AbstractContextManager:
        """The replicas' average when they differ (``centralized = False``), else nothing."""
        if self.centralized or self.comm.size == 1:
            return contextlib.nullcontext()
        if getattr(self, "_evaluation_vector", None) is None:
            self._evaluation_vector = ModelVector(self.parts.model)
        return averaged_models(self._evaluation_vector, self.wire, self.comm.size)
