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
  (mlbench_worker/implementations/tensorflow/), an optional extra (`pip install 'mlbench[tensorflow]'`);
- `spark`: task 2 on a Spark standalone cluster the ranks bring up themselves
  (mlbench_worker/implementations/spark/): the reference's mini-batch SGD written on Spark's
  broadcast and tree aggregate, or MLlib's L-BFGS (algorithm `lbfgs`, Spark's only); an
  optional extra (`pip install 'mlbench[spark]'`) that also needs Java on the workers;
- `flink`: task 2 on a Flink standalone cluster the ranks bring up themselves
  (mlbench_worker/implementations/flink/): the same mini-batch SGD in one streaming job
  whose gradients Flink's keyed stream combines; an optional extra (`mlbench[flink]`) in a
  Python environment of its own (PyFlink's pins cannot share the workers' numpy and
  protobuf), named by the setting `python_setting` names, plus Java on the workers.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlbench_worker.shared import algorithm_catalogue

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
    # Programs the workers need beside `module`, looked up on their PATH (Java for Spark),
    # each with the Debian package that installs it.
    programs: tuple[tuple[str, str], ...] = ()
    # How it exchanges when not through a PyTorch backend, in words ("" for PyTorch's).
    own_exchange: str = ""
    gpu: bool = True  # can train on GPUs
    # The setting naming the Python its ranks run, where that is not the workers' own (an
    # environment of its own: Flink's); "" or the setting unset: the driver's Python.
    python_setting: str = ""

    def admits(self, algorithm: str) -> bool:
        """Whether it runs `algorithm`: in its own list (empty: every one), and the
        algorithm not tied to other implementations (algorithm_catalogue)."""
        known = algorithm_catalogue.ALGORITHMS.get(algorithm)
        if known is not None and known.implementations and self.name not in known.implementations:
            return False
        return not self.algorithms or algorithm in self.algorithms

    def algorithm_refusal(self, algorithm: str) -> str:
        """Why it does not run `algorithm`, in words (for the API and the worker alike)."""
        known = algorithm_catalogue.ALGORITHMS.get(algorithm)
        if known is not None and known.implementations and self.name not in known.implementations:
            return (
                f"algorithm {algorithm} runs on implementation "
                f"{', '.join(known.implementations)} only, not on {self.name}"
            )
        return (
            f"implementation {self.name} runs algorithm {', '.join(self.algorithms)} only, "
            f"not {algorithm!r}"
        )

    def requirements(self) -> tuple[str, ...]:
        """What the workers must have, as the cluster drivers' probe asks it: the module,
        then `program:NAME` for each program."""
        return (self.module, *(f"program:{p}" for p, _ in self.programs))

    def install_hint(self) -> str:
        """How to give workers what this implementation needs, in words."""
        if not self.extra:
            hint = f"install {self.module} in the workers' Python environment"
        else:
            hint = f"pip install 'mlbench[{self.extra}]' in the workers' Python environment"
        for program, package in self.programs:
            hint += f" and put {program} on their PATH (Debian: apt-get install {package})"
        return hint


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
            own_exchange="TensorFlow's own collective ops (ring on CPU, NCCL on GPU)",
        ),
        Implementation(
            "spark",
            "Apache Spark (standalone cluster, MLlib)",
            "spark",
            "task 2 on a Spark standalone cluster over the run's ranks: the same mini-batch "
            "SGD on a broadcast model and a tree aggregate (allreduce), or MLlib's "
            "LogisticRegression with L-BFGS (lbfgs)",
            "pyspark",
            extra="spark",
            algorithms=("allreduce", "lbfgs"),
            checkpoints=False,
            programs=(("java", "default-jre-headless"),),
            own_exchange="Spark's broadcast and tree aggregate over its own connections",
            gpu=False,
        ),
        Implementation(
            "flink",
            "Apache Flink (standalone cluster, PyFlink DataStream)",
            "flink",
            "task 2 on a Flink standalone cluster over the run's ranks: the same mini-batch "
            "SGD in one streaming job, the model broadcast to a subtask per rank and their "
            "gradients combined by a keyed stream (allreduce)",
            "pyflink",
            extra="flink",
            algorithms=("allreduce",),
            checkpoints=False,
            programs=(("java", "default-jre-headless"),),
            own_exchange="Flink's broadcast and keyed streams over its own network stack",
            gpu=False,
            python_setting="MLBENCH_FLINK_PYTHON",
        ),
    )
}


def get(name: str) -> Implementation | None:
    """The implementation called `name`, or None."""
    return IMPLEMENTATIONS.get(name)
