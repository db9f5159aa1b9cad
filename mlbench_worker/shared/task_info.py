"""What a catalogue entry is: a task's goals and fields, and the original platform's images.

Apart from the list of tasks (catalogue.py) so that the entries can live in more than one
module (sequence_catalogue.py holds the sequence tasks, 3 and 4) without an import cycle:
every module of entries imports this one, and catalogue.py gathers them. The original
platform's images live here too, because an entry answers which of them it runs
(`TaskInfo.seed_images`). Plain data, no torch and no Django, like the catalogue.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlbench_worker.shared.algorithm_catalogue import GENERAL_ALGORITHMS
from mlbench_worker.shared.implementation_catalogue import DEFAULT_IMPLEMENTATION

UP, DOWN = "up", "down"  # a goal is reached when the metric rises to / falls to its value
# What a task does. A "training" task trains a model towards accuracy goals on a data set; a
# "measurement" task (the backend benchmark) measures the platform itself: it has no
# goals, data set, model, epochs or checkpoints, only a time budget that bounds it.
TRAINING, MEASUREMENT = "training", "measurement"


@dataclass(frozen=True)
class Goal:
    """A value of a metric that counts as reaching the goal, and where the value comes from."""

    metric: str  # the metric the worker posts, e.g. "val_accuracy"
    value: float
    direction: str = UP
    source: str = ""

    def reached(self, measured: float) -> bool:
        return measured >= self.value if self.direction == UP else measured <= self.value


@dataclass(frozen=True)
class TaskInfo:
    """One benchmark task as the platform shows, validates and compares it."""

    name: str  # e.g. "resnet20-cifar10": the API's `task`, the worker's first argument
    title: str  # how people (and the seed client) call it
    category: str  # the seed's task number and area, e.g. "1a image classification"
    model: str
    dataset: str  # the real data set; "synthetic" is always offered beside it
    goals: dict[str, Goal]  # goal name -> goal; "standard" is the default
    batch_size: int  # per worker
    learning_rate: float  # for one worker at `batch_size`; scaled with the workers
    max_epochs: int
    time_budget: float  # seconds of training the seed's accuracy-after-time rule allows
    throughput_unit: str  # what the worker counts per second, e.g. "images/s"
    throughput_metric: str  # the metric that carries it
    gpu_supported: bool = True
    description: str = ""
    default_goal: str = "standard"
    kind: str = TRAINING
    # The training algorithms it admits (mlbench_worker/shared/algorithm_catalogue.py); the first
    # is its default.
    algorithms: tuple[str, ...] = GENERAL_ALGORITHMS
    # The implementations that run it (mlbench_worker/shared/implementation_catalogue.py); the
    # first is its default. torch-ddp needs a model trained by autograd; tensorflow has
    # the ResNets of task 1a only.
    implementations: tuple[str, ...] = (DEFAULT_IMPLEMENTATION,)
    # The learning-rate schedules its worker offers (`--lr-schedule`, the run's
    # `lr_schedule`); the first is its default. Empty: the task has one fixed schedule and
    # a run of it takes no lr_schedule.
    lr_schedules: tuple[str, ...] = ()
    # Whether a run also submits its five best classes per example and the evaluator grades
    # top-5 accuracy beside top-1 (shared/evaluation/); the goals stay on top-1.
    top5: bool = False
    # Algorithms of the algorithm catalogue it does not admit, each with why (shown in the
    # docs and the API's refusal); empty when it admits them all.
    not_admitted: tuple[tuple[str, str], ...] = ()

    @property
    def measurement(self) -> bool:
        """True for a task that measures the platform and trains nothing (see MEASUREMENT)."""
        return self.kind == MEASUREMENT

    @property
    def datasets(self) -> tuple[str, ...]:
        """What `dataset` may be: auto (the real set when it can be had), it, or synthetic;
        nothing for a measurement, which reads no data."""
        if self.measurement:
            return ()
        return ("auto", self.dataset, "synthetic")

    @property
    def seed_images(self) -> tuple[str, ...]:
        """The original platform's images (no tag) that run this task here."""
        return tuple(s.image for s in SEED_IMAGES if s.task == self.name)

    def why_not(self, algorithm: str) -> str:
        """Why the task does not admit `algorithm` ("" when it does, or says nothing)."""
        return dict(self.not_admitted).get(algorithm, "")

    def goal(self, name: str) -> Goal:
        """The goal called `name`; KeyError when the task has no such goal."""
        return self.goals[name]


# The seed's closed division gives a run 2 hours of training for accuracy after time.
SEED_TIME_BUDGET = 7200.0


@dataclass(frozen=True)
class SeedImage:
    """One official image of the original platform's client, and the task here that runs it."""

    title: str  # the client's display name (its MLBENCH_IMAGES key)
    image: str  # repository without a tag
    task: str | None  # None: not implemented here yet
    implementation: str = DEFAULT_IMPLEMENTATION  # which code here runs it


# Every official image the original client (mlbench-core 2.x and 3.x) names. The older
# ResNet-20 images run task 1a under older names: the task, its goals and its data are the
# same, so they map to that task here; the DDP and TensorFlow images run it through those
# frameworks, so they map to the implementation of the same name.
SEED_IMAGES: tuple[SeedImage, ...] = (
    SeedImage(
        "PyTorch Cifar-10 ResNet-20",
        "mlbench/pytorch-cifar10-resnet20-all-reduce",
        "resnet20-cifar10",
    ),
    SeedImage(
        "PyTorch Cifar-10 ResNet-20 (DDP)",
        "mlbench/pytorch-cifar10-resnet20-ddp",
        "resnet20-cifar10",
        "torch-ddp",
    ),
    SeedImage("PyTorch Cifar-10 ResNet-20", "mlbench/pytorch-cifar10-resnet", "resnet20-cifar10"),
    SeedImage(
        "PyTorch Cifar-10 ResNet-20 (Scaling LR)",
        "mlbench/pytorch-cifar10-resnet-scaling",
        "resnet20-cifar10",
    ),
    SeedImage(
        "PyTorch Linear Logistic Regression",
        "mlbench/pytorch-epsilon-logistic-regression-all-reduce",
        "logreg-epsilon",
    ),
    SeedImage(
        "PyTorch Language Modeling (AWD-LSTM)",
        "mlbench/pytorch-wikitext2-lstm-all-reduce",
        "awd-lstm-wikitext2",
    ),
    SeedImage("PyTorch Machine Translation GNMT", "mlbench/pytorch-wmt16-gnmt-all-reduce", None),
    SeedImage(
        "PyTorch Machine Translation Transformer",
        "mlbench/pytorch-wmt17-transformer-all-reduce",
        "transformer-wmt17",
    ),
    SeedImage(
        "Tensorflow Cifar-10 ResNet-20 Open-MPI",
        "mlbench/tensorflow-cifar10-resnet",
        "resnet20-cifar10",
        "tensorflow",
    ),
    SeedImage(
        "PyTorch Distributed Backend benchmarking",
        "mlbench/pytorch-backend-benchmark",
        "backend-benchmark",
    ),
)
