# Over 400 lines: the one list of tasks with the rules read from it, kept in one place.
"""The task catalogue: the one list of benchmark tasks the whole platform reads.

Plain data, no torch and no Django: the master (API validation, MLBENCH_TASKS' default,
the new-run form), the dashboard, the `mlbench` command, the ApiClient and the worker all
import this module, so a task exists everywhere as soon as it has an entry here and its
worker code in mlbench_worker/tasks/. What must be equal for two results to be comparable
(the model, the data set, the goals with the metric that decides them) is stated once.

Training details that only the worker needs (momentum, warm-up, decay schedule) stay in
the worker's task definitions, which read their shared fields from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mlbench_worker.shared.algorithm_catalogue import ALGORITHMS, GENERAL_ALGORITHMS
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


# He et al. 2016 report 91.25 % (ResNet-20) to 93.03 % (ResNet-56) on CIFAR-10; "paper" asks
# for 91 % whatever the depth, "standard" and "light" are the platform's shorter goals.
_CIFAR10_SOURCE = "He et al. 2016 (paper); mlbench's shorter goals (standard, light)"
_CIFAR10_GOALS = {
    "light": Goal("val_accuracy", 0.70, UP, _CIFAR10_SOURCE),
    "standard": Goal("val_accuracy", 0.80, UP, _CIFAR10_SOURCE),
    "paper": Goal("val_accuracy", 0.91, UP, _CIFAR10_SOURCE),
}
# The seed's closed division gives a run 2 hours of training for accuracy after time.
SEED_TIME_BUDGET = 7200.0


def _resnet_cifar10(depth: int, preact: bool = False) -> TaskInfo:
    model = f"{'preact-' if preact else ''}resnet{depth}"
    variant = "pre-activation " if preact else ""
    return TaskInfo(
        name=f"{model}-cifar10",
        title=f"PyTorch Cifar-10 {variant.title()}ResNet-{depth}",
        category="1a image classification",
        model=model,
        dataset="cifar10",
        goals=dict(_CIFAR10_GOALS),
        batch_size=128,
        learning_rate=0.1,
        max_epochs=164,
        time_budget=SEED_TIME_BUDGET,
        throughput_unit="images/s",
        throughput_metric="images_per_sec",
        description=f"Task 1a: {variant}ResNet-{depth} on CIFAR-10, synchronous SGD",
        implementations=("reference", "torch-ddp") + (() if preact else ("tensorflow",)),
    )


# Task 2 as the seed's benchmark documents define it: 89 % test accuracy on epsilon, 80 % as
# the light goal. The worker's code and the training details are in mlbench_worker/tasks/epsilon/.
_EPSILON_SOURCE = "mlbench benchmark task 2 (epsilon, logistic regression): 89 %, light 80 %"
LOGREG_EPSILON = TaskInfo(
    name="logreg-epsilon",
    title="PyTorch Linear Logistic Regression",
    category="2 linear learning",
    model="logistic-regression",
    dataset="epsilon",
    goals={
        "light": Goal("val_accuracy", 0.80, UP, _EPSILON_SOURCE),
        "standard": Goal("val_accuracy", 0.89, UP, _EPSILON_SOURCE),
    },
    batch_size=128,
    learning_rate=4.0,
    max_epochs=20,
    time_budget=SEED_TIME_BUDGET,
    throughput_unit="samples/s",
    throughput_metric="samples_per_sec",
    gpu_supported=True,
    description="Task 2: L2-regularised logistic regression on epsilon, synchronous SGD",
    # spark: the same SGD on Spark's primitives and MLlib's L-BFGS (its own); flink: the SGD.
    algorithms=GENERAL_ALGORITHMS
    + tuple(name for name, a in ALGORITHMS.items() if "spark" in a.implementations),
    implementations=("reference", "spark", "flink"),
)

# Task 1b. ResNet-50's standard is MLPerf Training's quality target for ResNet-50 v1.5; the
# other depths have no MLPerf target, so theirs is the top-1 accuracy torchvision's reference
# weights reach with the same 90-epoch recipe (69.76, 73.31, 77.37 %), rounded down to the
# half point. "light" (50 % top-1, 500 times chance) is mlbench's own short goal, to show
# that a set-up learns ImageNet at a fraction of the cost; it is not taken from a publication
# and we have not yet measured at which epoch each depth passes it (no GPU was at hand).
# Details: mlbench_worker/tasks/imagenet/task.py.
_IMAGENET_STANDARD = {18: 0.695, 34: 0.73, 50: 0.759, 101: 0.77}
_IMAGENET_SOURCE = {
    50: "MLPerf Training ResNet-50 v1.5 (standard); mlbench's light goal",
    **dict.fromkeys(
        (18, 34, 101),
        "torchvision reference weights, 90-epoch recipe (standard); mlbench's light goal",
    ),
}


# Task 1b's schedules after the warm-up: Goyal et al.'s steps (the default), a cosine to
# zero, and MLPerf's closed ResNet schedule (poly), the one whose MLPerf log passes the
# closed rules (mlbench_worker/tasks/imagenet/task.py says what each does).
IMAGENET_LR_SCHEDULES = ("step", "cosine", "poly")


def _resnet_imagenet(depth: int) -> TaskInfo:
    source = _IMAGENET_SOURCE[depth]
    return TaskInfo(
        name=f"resnet{depth}-imagenet",
        title=f"PyTorch ImageNet ResNet-{depth}",
        category="1b image classification",
        model=f"resnet{depth}",
        dataset="imagenet",
        goals={
            "light": Goal("val_accuracy", 0.50, UP, source),
            "standard": Goal("val_accuracy", _IMAGENET_STANDARD[depth], UP, source),
        },
        batch_size=256,
        learning_rate=0.1,
        max_epochs=90,
        time_budget=SEED_TIME_BUDGET,
        throughput_unit="images/s",
        throughput_metric="images_per_sec",
        description=f"Task 1b: ResNet-{depth} (v1.5) on ImageNet, synchronous SGD",
        implementations=("reference", "torch-ddp"),
        lr_schedules=IMAGENET_LR_SCHEDULES,
        top5=True,
    )


# Task 3: language modelling on WikiText-2 (mlbench_worker/tasks/wikitext2/). 3a is the
# original platform's task: the AWD-LSTM of Merity, Keskar, Socher 2017 ("Regularizing and
# Optimizing LSTM Language Models", arXiv:1708.02182), validation perplexity 70, light 90,
# lower is better. 3b is ours: a small decoder-only Transformer in nanoGPT's shape (Radford
# et al. 2019's GPT-2 blocks at CPU size); its goals are not measured on WikiText-2 here
# (the corpus could not be had on the machines this was built on): see the task's module.
_LSTM_SOURCE = "mlbench task 3a (AWD-LSTM, Merity et al. 2017): perplexity 70, light 90"
# EF-SignSGD (algorithms/signsgd.py) compresses momentum SGD's step and applies it in place
# of the optimizer's, as its authors' optimizer does; the language models step with other
# optimizers, whose steps it would silently replace.
_SIGN_ON_ANOTHER_OPTIMIZER = (
    "EF-SignSGD compresses and applies momentum SGD's step in place of the optimizer's, and "
    "this task's optimizer is {}"
)
_GPT_EXCLUDED = (("signsgd", _SIGN_ON_ANOTHER_OPTIMIZER.format("AdamW")),)
_LSTM_EXCLUDED = (
    ("signsgd", _SIGN_ON_ANOTHER_OPTIMIZER.format("an averaged SGD with gradient clipping")),
    (
        "localsgd",
        "its ranks average models, while the AWD-LSTM's averaged SGD keeps a running "
        "average of the iterates per rank that the model averaging does not see",
    ),
    (
        "decentralized",
        "its ranks keep different models, while the AWD-LSTM's averaged SGD keeps a "
        "running average of the iterates per rank that the gossip does not see",
    ),
    (
        "diloco",
        "its ranks step apart and restart from the outer model every H steps, while the "
        "AWD-LSTM's averaged SGD keeps a running average of each rank's own iterates that "
        "the outer step neither sees nor resets",
    ),
)
AWD_LSTM_WIKITEXT2 = TaskInfo(
    name="awd-lstm-wikitext2",
    title="PyTorch Language Modeling (AWD-LSTM)",
    category="3a language modelling",
    model="awd-lstm",
    dataset="wikitext2",
    goals={
        "light": Goal("val_perplexity", 90.0, DOWN, _LSTM_SOURCE),
        "standard": Goal("val_perplexity", 70.0, DOWN, _LSTM_SOURCE),
    },
    batch_size=80,
    learning_rate=30.0,
    max_epochs=750,
    time_budget=SEED_TIME_BUDGET,
    throughput_unit="tokens/s",
    throughput_metric="tokens_per_sec",
    description="Task 3a: AWD-LSTM language model on WikiText-2, synchronous SGD then ASGD",
    algorithms=tuple(a for a in GENERAL_ALGORITHMS if a not in dict(_LSTM_EXCLUDED)),
    implementations=("reference", "torch-ddp"),
    not_admitted=_LSTM_EXCLUDED,
)
_GPT_SOURCE = (
    "mlbench task 3b: an estimate from the model's size, not yet measured on the real "
    "corpus (docs/tasks.rst)"
)
GPT_WIKITEXT2 = TaskInfo(
    name="gpt-wikitext2",
    title="PyTorch Language Modeling (small GPT)",
    category="3b language modelling",
    model="gpt-small",
    dataset="wikitext2",
    goals={
        "light": Goal("val_perplexity", 250.0, DOWN, _GPT_SOURCE),
        "standard": Goal("val_perplexity", 180.0, DOWN, _GPT_SOURCE),
    },
    batch_size=16,
    learning_rate=1e-3,
    max_epochs=20,
    time_budget=SEED_TIME_BUDGET,
    throughput_unit="tokens/s",
    throughput_metric="tokens_per_sec",
    description="Task 3b: a small GPT (4 layers, width 256) on WikiText-2, AdamW",
    algorithms=tuple(a for a in GENERAL_ALGORITHMS if a not in dict(_GPT_EXCLUDED)),
    implementations=("reference", "torch-ddp"),
    not_admitted=_GPT_EXCLUDED,
)

# The backend benchmark (the seed's "distributed backend benchmarking" image): all-reduce
# and broadcast latency and bus bandwidth per message size and backend, measured by
# mlbench_worker/backend_benchmark/. Its "throughput" is the highest bus bandwidth it measured, in
# Mbit/s like the network settings (max_bandwidth), so a shaped link's ceiling reads directly.
# The budget bounds the sweep; what was measured when it runs out is kept and said.
BACKEND_BENCHMARK = TaskInfo(
    name="backend-benchmark",
    title="PyTorch Distributed Backend benchmarking",
    category="communication",
    model="",
    dataset="",
    goals={},
    batch_size=0,
    learning_rate=0.0,
    max_epochs=0,
    time_budget=1800.0,
    throughput_unit="Mbit/s",
    throughput_metric="busbw_mbps",
    description="All-reduce and broadcast latency and bus bandwidth, 1 KiB to 64 MiB, per backend",
    default_goal="",
    kind=MEASUREMENT,
    algorithms=(),
    implementations=(),
)

TASKS: dict[str, TaskInfo] = {
    t.name: t
    for t in [_resnet_cifar10(d) for d in (20, 32, 44, 56)]
    + [_resnet_cifar10(d, preact=True) for d in (20, 56)]
    + [LOGREG_EPSILON]
    + [_resnet_imagenet(d) for d in (18, 34, 50, 101)]
    + [AWD_LSTM_WIKITEXT2, GPT_WIKITEXT2]
    + [BACKEND_BENCHMARK]
}
DEFAULT_TASK = "resnet20-cifar10"
DEFAULT_SEED = 42  # a run's seed when none is given: the worker's --seed and the master's
# The original client's names for the open division: its `image_name` for "my own image and
# command", and its `backend` value that defers to `custom_backend`.
CUSTOM_IMAGE = "custom_image"
CUSTOM_BACKEND = "custom_backend"


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
        None,
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


class UnknownTask(KeyError):
    """A name that is not in the catalogue; the message lists what is."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"task {self.name!r} is not known; known tasks: {', '.join(TASKS)}"


def get(name: str) -> TaskInfo:
    """The task called `name`; UnknownTask (a KeyError) naming the known ones otherwise."""
    try:
        return TASKS[name]
    except KeyError:
        raise UnknownTask(name) from None


def is_measurement(name: str | None) -> bool:
    """Whether the task called `name` is a measurement (no goals, data, checkpoints); False
    for an unknown name, which the callers refuse elsewhere."""
    info = TASKS.get(name or DEFAULT_TASK)
    return info is not None and info.measurement


# The unit of a run whose throughput metric cannot be told (a task this version does not know).
NEUTRAL_UNIT = "samples/s"


def throughput_of(task: str | None, *reported: Callable[[str], bool]) -> tuple[str | None, str]:
    """(metric, unit) of a run's throughput: what its task counts per second.

    Tasks count different things (task 1a images, task 2 samples), so the catalogue entry of
    the run's task decides. A task the catalogue does not know (a run made by another
    version) is read by what it reported: each predicate in `reported` in turn (e.g. "the
    summary holds it", then "its series has points") is asked about every known throughput
    metric, and the first found brings the unit the catalogue pairs with it; with none, no
    metric and NEUTRAL_UNIT. The dashboard applies the same rule (dashboard/js/tasks.js);
    tests/rules/throughput_cases.json holds both to it.
    """
    info = TASKS.get(task) if task else None
    if info is not None:
        return info.throughput_metric, info.throughput_unit
    for has in reported:
        found = next((t for t in TASKS.values() if has(t.throughput_metric)), None)
        if found is not None:
            return found.throughput_metric, found.throughput_unit
    return None, NEUTRAL_UNIT


def goal_names() -> list[str]:
    """Every goal name some task has, in the order they first appear."""
    return list(dict.fromkeys(g for t in TASKS.values() for g in t.goals))


def dataset_names() -> list[str]:
    """Every value some task accepts for `dataset`, "auto" first."""
    return list(dict.fromkeys(d for t in TASKS.values() for d in t.datasets))


def seed_image(image: str) -> SeedImage | None:
    """The original platform's official image called `image` (its tag ignored), or None."""
    repository, _, tag = image.strip().rpartition(":")
    if not repository or "/" in tag:  # no tag; a ":" before the last "/" is a registry port
        repository = image.strip()
    return next((s for s in SEED_IMAGES if s.image == repository), None)


def by_image(image: str) -> TaskInfo | None:
    """The task here that runs an original-platform image (its tag ignored), or None."""
    found = seed_image(image)
    return TASKS[found.task] if found and found.task else None


def implemented_images(offered: list[str] | None = None) -> list[str]:
    """The official images this platform runs (":latest"), of the tasks in `offered` if given."""
    return [
        f"{s.image}:latest"
        for s in SEED_IMAGES
        if s.task and (offered is None or s.task in offered)
    ]


def _words(name: str) -> str:
    return " ".join(name.split()).casefold()


def seed_by_title(title: str) -> SeedImage | None:
    """The original client's official image with this display name (any case), or None."""
    return next((s for s in SEED_IMAGES if s.title.casefold() == _words(title)), None)


def by_title(title: str) -> TaskInfo | None:
    """The task a display name stands for: ours (`title`) or the original client's, or None.

    Case and blanks are ignored, so "pytorch cifar-10 resnet-20" works too.
    """
    info = next((t for t in TASKS.values() if t.title.casefold() == _words(title)), None)
    found = seed_by_title(title)
    return info or (TASKS[found.task] if found and found.task else None)
