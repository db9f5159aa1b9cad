"""Local SGD: each rank steps on its own, and every `period` steps the models are averaged
(Lin, Stich, Patel, Jaggi: Don't use large mini-batches, use local SGD, ICLR 2020;
Algorithm 1 with H = period local steps).

Reference: the paper's Algorithm 1 as written (the authors' code is
github.com/epfml/LocalSGD-Code; post-local SGD, their variant that starts local steps only
after the first decay, is not offered). Its choices: momentum stays local to each rank,
nothing is compressed, every rank averages after the same H steps.

Every rank r, every step t:

    x_r <- x_r - lr * g_r(x_r)                 no gradient exchange (the optimizer's own
                                               momentum and weight decay stay local)
    if (t + 1) % H == 0:
        x_r <- (1/K) sum_s x_s                  one all-reduce of the parameters AND
                                               buffers (batch-norm statistics), then / K

The learning rate is the task's, scaled for K workers as for synchronous SGD (Lin et al.
scale it the same way): with H = 1 and plain SGD the average after each step is exactly
synchronous SGD's update. Averaging follows the run's global step count, so a resumed run
averages at the same steps. Between averagings the replicas differ: evaluation sees their
average (interface.AveragedForEvaluation), and a checkpoint holds rank 0's model. The trainer's
scalar slots are summed every step (a 20-byte all-reduce, not counted).

Bytes per step: on an averaging step 4 x (parameters + floating buffers); 0 otherwise.
"""

from __future__ import annotations

from typing import Any

from mlbench_worker.algorithms.interface import AveragedForEvaluation, Parts


class LocalSgd(AveragedForEvaluation):
    """See the module docstring."""

    name = "localsgd"

    def __init__(self, parts: Parts, options: dict[str, Any]) -> None:
        super().__init__(parts, options)
        self.period = int(options["period"])

    def finish(self) -> float:
        self.sum_scalars()
        return 0.0

    def after_step(self, step: int) -> None:
        if step % self.period or self.comm.size == 1:
            return
        flat = self.vector.pack()
        self.wire.allreduce_(flat)
        flat.mul_(1.0 / self.comm.size)
        self.vector.unpack(flat)

    def describe(self) -> str:
        return f"localsgd: models averaged every {self.period} steps"


def build(parts: Parts, options: dict[str, Any]) -> LocalSgd:
    return LocalSgd(parts, options)
