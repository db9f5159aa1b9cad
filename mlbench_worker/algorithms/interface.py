"""The one interface between the training loop and a training algorithm.

The trainer (training/trainer.py, Trainer.train_one_epoch) calls, each step:

1. `begin()` before forward and backward: zero the flat gradient buffer (and arm any hooks
   that start messages during backward); reset this step's `comm_bytes`;
2. backward writes this rank's gradient, multiplied by `grad_scale`, into the buffer
   (training.comm.FlatGradients), and the trainer sets the scalar slots (loss, correct, count, stop
   and report flags) at its head;
3. `finish()` after backward: on return, the scalar slots hold their sums over ALL ranks
   (so evaluation, goal tracking and stopping agree everywhere, whatever the algorithm) and
   the gradient part holds what the optimizer must apply on this rank; it returns the
   seconds of communication already hidden behind backward (0 when nothing overlapped);
4. `step(optimizer)`: the optimizer's step by default; an algorithm that compresses the
   optimizer's update rather than the gradient (EF-SignSGD) applies what it exchanged
   itself. The learning rate of the step is already in the optimizer's groups when
   `finish` is called;
5. `after_step(step)`, with `step` the number of steps completed: model averaging
   (local SGD) happens here.

`comm_bytes` after the step: the payload bytes this rank handed to collectives and
point-to-point sends during 3 and 5 for the model update (gradients, compressed messages or
models), counted as algorithms/wire.py says (an all-reduce counts the rank's contribution,
not what a ring moves; an all-gather the rank's own message; a point-to-point send once per
peer). The trainer's scalar slots (20 bytes, summed every step by every algorithm) are not
counted, so a full fp32 all-reduce of the gradients counts exactly 4 bytes per gradient
element and the compression ratio of the baseline is 1. One rank sends nothing: 0.

`evaluation()` is the context in which the trainer evaluates: a centralized algorithm's
ranks hold the same model, so nothing is done; the others average a copy of the models
(parameters and buffers) for the evaluation and restore each rank's own afterwards
(`AveragedForEvaluation`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from mlbench_worker.algorithms.wire import Wire
from mlbench_worker.training.comm import Communicator, FlatGradients


@dataclass
class Parts:
    """What an algorithm may use of the trainer: its model, gradients, group and seed."""

    model: torch.nn.Module
    grads: FlatGradients
    comm: Communicator
    seed: int
    # The trainer's optimizer: its groups hold this step's rate, momentum and weight decay
    # (read by algorithms that compress the update itself). None: plain SGD at rate 1.
    optimizer: torch.optim.Optimizer | None = None
    # The counted communicator, made and read by the trainer (the harness counts the bytes,
    # not the algorithm). None (tests that build an algorithm alone): the algorithm makes one.
    wire: Wire | None = None


class Exchange:
    """The base of every algorithm (see the module docstring for the calling order)."""

    name = ""
    centralized = True  # every rank ends each step with the same model
    overlap = False  # messages start during backward
    buckets: list = []  # the all-reduce's buckets (only allreduce has any)
    # Seconds of this step's communication that backward itself waited for (torch-ddp's
    # reducer finishes its all-reduce inside backward); the trainer books them as
    # communication, not compute. Our own exchanges wait in finish() instead: 0.
    waited_in_backward = 0.0
    # What the trainer calls for a training forward pass when not the model itself: a
    # framework's wrapper around it (torch-ddp's DistributedDataParallel).
    train_module: torch.nn.Module | None = None
    # The bytes per step the algorithm says it sends, when it says so (an int property):
    # reported beside the trainer's measured count and compared, never used instead of it.
    claimed_bytes: int | None = None

    def __init__(self, parts: Parts, options: dict[str, Any]) -> None:
        self.parts, self.options = parts, dict(options)
        self.grads, self.comm = parts.grads, parts.comm
        self.wire = parts.wire if parts.wire is not None else Wire(parts.comm)
        # Averaging algorithms: the loss is scaled by 1/K so that a sum over ranks is the mean.
        self.grad_scale = 1.0 / self.comm.size if self.comm.size > 1 else 1.0
        self.keep_sent = False  # tests: keep this rank's decompressed message in last_sent
        self.last_sent: torch.Tensor | None = None

    @property
    def comm_bytes(self) -> int:
        """This step's bytes so far (see the module docstring)."""
        return self.wire.sent

    def begin(self) -> None:
        self.grads.zero_()
        self.wire.reset()

    def finish(self) -> float:
        raise NotImplementedError

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """Apply this step's update: the optimizer's, on the exchanged gradients."""
        optimizer.step()

    def after_step(self, step: int) -> None:
        """After the optimizer's step number `step` (1-based): nothing by default."""

    def evaluation(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def remove(self) -> None:
        pass

    def describe(self) -> str:
        return self.name

    def sum_scalars(self) -> None:
        """The trainer's scalar slots summed over all ranks, in fp32, not counted."""
        self.wire.allreduce_(self.grads.extra, count=False)


class ModelVector:
    """A model's parameters and floating buffers (batch-norm statistics) as one fp32 vector:
    what model averaging and gossip send. Integer buffers (batches seen) are equal on every
    rank and stay as they are."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.tensors = [
            t for t in list(model.parameters()) + list(model.buffers()) if t.is_floating_point()
        ]
        self.numel = sum(t.numel() for t in self.tensors)
        device = self.tensors[0].device
        self.flat = torch.empty(self.numel, dtype=torch.float32, device=device)

    def pack(self) -> torch.Tensor:
        """The current values, in `flat` (overwritten at every call)."""
        offset = 0
        with torch.no_grad():
            for t in self.tensors:
                n = t.numel()
                self.flat[offset : offset + n].view(t.shape).copy_(t)
                offset += n
        return self.flat

    def unpack(self, flat: torch.Tensor) -> None:
        """Write `flat` back into the model's tensors."""
        offset = 0
        with torch.no_grad():
            for t in self.tensors:
                n = t.numel()
                t.copy_(flat[offset : offset + n].view(t.shape))
                offset += n


class AveragedForEvaluation(Exchange):
    """An algorithm whose ranks hold different models: evaluation sees their average.

    The average of the replicas is the model these algorithms converge to and the one their
    papers evaluate (Lin et al. 2020 evaluate the averaged model; Lian et al. 2017 report
    the average of the local models). Each rank evaluates the same averaged copy on its part
    of the test set (one all-reduce of the models, outside training and not counted in
    comm_bytes), then gets its own model back, so training continues unchanged.
    """

    centralized = False

    def __init__(self, parts: Parts, options: dict[str, Any]) -> None:
        super().__init__(parts, options)
        self.vector = ModelVector(parts.model)
        self.grad_scale = 1.0  # each rank steps on its own (unscaled) gradient

    def evaluation(self) -> contextlib.AbstractContextManager:
        return averaged_models(self.vector, self.wire, self.comm.size)


@contextlib.contextmanager
def averaged_models(vector: ModelVector, wire: Wire, size: int) -> Iterator[None]:
    """The replicas' average (parameters and floating buffers) in the model while the block
    runs, each rank's own model back afterwards: what evaluation sees when ranks differ."""
    if size == 1:
        yield
        return
    own = vector.pack().clone()
    mean = own.clone()
    wire.allreduce_(mean, count=False)
    mean.mul_(1.0 / size)
    vector.unpack(mean)
    try:
        yield
    finally:
        vector.unpack(own)
