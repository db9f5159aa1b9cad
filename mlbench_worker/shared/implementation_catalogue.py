"""The catalogue of implementations: which code trains a run, the framework dimension.

Plain data, no torch, no TensorFlow and no Django: the master (run rules, form, API), the
`mlbench` command, the dashboard and the worker read it, so an implementation, the
framework it runs on, the module a worker needs for it and the algorithms it can run are
stated once. Which tasks have which implementation is the task catalogue's
(catalogue.TaskInfo.implementations).

Three implementations train the same model on the same shards with the same schedule and
goal tracking, so that between them only the framework differs:

- `reference`: the platform's own training loop (mlbench_worker/training/trainer.py), gradients
  exchanged by our code over mpi4py, gloo or NCCL: every training algorithm runs on it;
- `torch-ddp`: the same loop with the model wrapped in PyTorch's DistributedDataParallel,
  which buckets and overlaps the all-reduce itself (mlbench_worker/algorithms/ddp.py);
- `tensorflow`: the same ResNet in Keras under tf.distribute.MultiWorkerMirroredStrategy
  (mlbench_worker/implementations/tensorflow/), an optional extra (`pip install 'mlbench[tensorflow]'`).
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_IMPLEMENTATION = "reference"


@dataclass(frozen=True)
class Implementation:
    """One implementation as the platform shows, validates and compares it."""

    name: str  # the API's `implementation`, the worker's --implementation
    title: str
    framework: str  # the framework whose version the run records: "pytorch", "tensorflow"
    summary: str
    module: str  # what the workers' Python must import to run it
    extra: str = ""  # the pip extra that installs `module` ("" when every worker has it)
    # The training algorithms it can run; empty: every algorithm the task admits.
    algorithms: tuple[str, ...] = ()
    backends: tuple[str, ...] = ()  # empty: every backend; else the ones it runs on
    checkpoints: bool = True  # writes checkpoints a later run may continue

    def admits(self, algorithm: str) -> bool:
        return not self.algorithms or algorithm in self.algorithms

    def install_hint(self) -> str:
        """How to give workers what this implementation needs, in words."""
        if not self.extra:
            return f"install {self.module} in the workers' Python environment"
        return f"pip install 'mlbench[{self.extra}]' in the workers' Python environment"


IMPLEMENTATIONS: dict[str, Implementation] = {
    i.name: i
    for i in (
        Implementation(
            "reference",
            "mlbench reference loop",
            "pytorch",
            "the platform's own loop; gradients exchanged by our code (mpi4py, gloo, nccl), "
            "every training algorithm",
            "torch",
        ),
        Implementation(
            "torch-ddp",
            "PyTorch DistributedDataParallel",
            "pytorch",
            "the same loop with the model in torch.nn.parallel.DistributedDataParallel "
            "(its own gradient buckets and overlap), gloo on CPU and nccl on GPU",
            "torch",
            algorithms=("allreduce",),
            backends=("gloo", "nccl"),
        ),
        Implementation(
            "tensorflow",
            "TensorFlow (Keras, MultiWorkerMirroredStrategy)",
            "tensorflow",
            "the same ResNet in Keras, trained under tf.distribute.MultiWorkerMirroredStrategy "
            "with its collective all-reduce across the ranks mpirun starts",
            "tensorflow",
            extra="tensorflow",
            algorithms=("allreduce",),
            checkpoints=False,
        ),
    )
}


def get(name: str) -> Implementation | None:
    """The implementation called `name`, or None."""
    return IMPLEMENTATIONS.get(name)
