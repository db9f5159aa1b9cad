# Over 400 lines: the seven algorithms are declared as data in this one list, with Option
# and its checks, which the master, the CLI and the worker all read.
"""The catalogue of training algorithms: the one list of how ranks may combine their work.

Plain data and checks, no torch and no Django: the master (run rules, the form, the API),
the `mlbench` command and the worker all read it, so an algorithm, its options, their
defaults and their bounds are stated once. The implementations are in
mlbench_worker/algorithms/, one module each, with the paper they follow.

`check` turns options as a client sends them (numbers, or text from a command line or a
form) into typed values with every default filled in, and says what is wrong by option
name, so the API, the CLI and the worker refuse the same things with the same words.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_ALGORITHM = "allreduce"


@dataclass(frozen=True)
class Option:
    """One option of an algorithm: its type, default and the values it may take."""

    name: str
    type: str  # "int", "float" or "choice"
    default: Any
    help: str
    minimum: float | None = None  # inclusive
    above: float | None = None  # exclusive lower bound
    maximum: float | None = None  # inclusive
    choices: tuple[str, ...] = ()

    def parse(self, value: Any) -> tuple[Any, str | None]:
        """(typed value, None), or (None, why it is refused)."""
        if self.type == "choice":
            text = str(value).strip().lower()
            if text not in self.choices:
                return None, f"{self.name} must be one of {', '.join(self.choices)}, not {value!r}"
            return text, None
        try:
            if isinstance(value, bool):
                raise ValueError
            number = int(value) if self.type == "int" else float(value)
            if self.type == "int" and isinstance(value, float) and not value.is_integer():
                raise ValueError
        except (TypeError, ValueError):
            kind = "a whole number" if self.type == "int" else "a number"
            return None, f"{self.name} must be {kind}, not {value!r}"
        if not math.isfinite(number) or not self._within(number):
            return None, f"{self.name} must be {self.bounds()}, not {value!r}"
        return number, None

    def _within(self, number: float) -> bool:
        return (
            (self.minimum is None or number >= self.minimum)
            and (self.above is None or number > self.above)
            and (self.maximum is None or number <= self.maximum)
        )

    def bounds(self) -> str:
        """The values it may take, in words (for messages and help)."""
        if self.choices:
            return "one of " + ", ".join(self.choices)
        low = (
            f"more than {self.above:g}"
            if self.above is not None
            else (f"at least {self.minimum:g}" if self.minimum is not None else "")
        )
        high = f"at most {self.maximum:g}" if self.maximum is not None else ""
        return " and ".join(p for p in (low, high) if p) or "any number"


@dataclass(frozen=True)
class Algorithm:
    """One algorithm as the platform shows, validates and compares it."""

    name: str
    title: str
    paper: str
    summary: str
    options: tuple[Option, ...] = ()
    centralized: bool = True  # every rank ends each step with the same model
    # The implementations that run it (implementation_catalogue.py); empty: any whose own
    # list admits it. An engine's own optimiser (MLlib's L-BFGS) runs on that engine only.
    implementations: tuple[str, ...] = ()
    # The code ours does what it does (the authors' or the ecosystem's), and the paper's
    # recipe: which of its settings are this algorithm's defaults, cited. The defaults are
    # what a closed-division run uses (fill records them in the run); open may change them.
    reference: str = ""
    recipe: str = ""

    def option(self, name: str) -> Option | None:
        return next((o for o in self.options if o.name == name), None)

    def defaults(self) -> dict[str, Any]:
        return {o.name: o.default for o in self.options}


ALGORITHMS: dict[str, Algorithm] = {
    a.name: a
    for a in (
        Algorithm(
            "allreduce",
            "Synchronous SGD, all-reduce",
            "the data-parallel baseline (Goyal et al. 2017, arXiv:1706.02677)",
            "every step, the gradients are summed over all ranks (in buckets, overlapped "
            "with backward) and averaged; with precision fp16 or bf16 they travel cast",
            (
                Option(
                    "precision",
                    "choice",
                    "fp32",
                    "the type gradients are all-reduced in",
                    choices=("fp32", "fp16", "bf16"),
                ),
            ),
            reference="the flat or bucketed all-reduce of torch DistributedDataParallel "
            "(implementation torch-ddp runs DDP itself)",
            recipe="the task's own schedule (linear scaling and warm-up, Goyal et al. 2017)",
        ),
        Algorithm(
            "powersgd",
            "PowerSGD",
            "Vogels, Karimireddy, Jaggi: PowerSGD, NeurIPS 2019",
            "each gradient matrix is compressed to rank r by one step of power iteration "
            "(warm-started from the previous step), with error feedback",
            (
                Option("rank", "int", 2, "the rank of the approximation", minimum=1),
                Option(
                    "min_compression_rate",
                    "float",
                    2.0,
                    "a matrix is compressed only when it shrinks at least this many times",
                    above=0.0,
                ),
                Option(
                    "warmup_steps",
                    "int",
                    0,
                    "steps of plain all-reduce before compressing",
                    minimum=0,
                ),
            ),
            reference="torch's DDP hook powerSGD_hook (torch/distributed/algorithms/"
            "ddp_comm_hooks/powerSGD_hook.py): per-tensor matrices, error feedback, warm start",
            recipe="rank 2, the rank the paper reports matching SGD's accuracy on CIFAR-10; "
            "compression from the first step as in the paper (warmup_steps 0; the hook's "
            "start_powerSGD_iter, whose documentation suggests 10 % of training, is the open "
            "division's to set); min_compression_rate 2, the hook's default",
        ),
        Algorithm(
            "topk",
            "Top-k sparsified SGD",
            "Stich, Cordonnier, Jaggi: Sparsified SGD with memory, NeurIPS 2018",
            "each rank sends the largest fraction `density` of its gradient (values and "
            "indices), with error feedback",
            (
                Option(
                    "density",
                    "float",
                    0.01,
                    "the fraction of entries sent",
                    above=0.0,
                    maximum=1.0,
                ),
            ),
            reference="Stich et al.'s mem-SGD (github.com/epfml/sparsifiedSGD): top-k of the "
            "whole vector, memory of the learning-rate-scaled step",
            recipe="density 0.01, mlbench's choice (the paper's experiments are on "
            "logistic regression, with no deep-network recipe); the task's schedule",
        ),
        Algorithm(
            "signsgd",
            "Scaled sign SGD with error feedback",
            "Karimireddy, Rebjock, Stich, Jaggi: Error feedback fixes SignSGD, ICML 2019",
            "each rank sends the signs of its error-corrected step, one bit each, "
            "with one scale (their mean magnitude) per parameter tensor",
            (
                Option(
                    "scale",
                    "choice",
                    "tensor",
                    "one scale per parameter tensor (the reference) or one for the whole model",
                    choices=("tensor", "model"),
                ),
                Option(
                    "compress",
                    "choice",
                    "step",
                    "what is compressed: the learning-rate-scaled momentum step (the "
                    "reference) or the gradient, with the optimizer applied after the exchange",
                    choices=("step", "gradient"),
                ),
                Option(
                    "momentum",
                    "choice",
                    "none",
                    "no momentum in the compressed step (the authors' experiments), or the task's",
                    choices=("none", "task"),
                ),
            ),
            reference="the authors' ErrorFeedbackSGD optimizer (github.com/epfml/"
            "error-feedback-SGD): per-tensor scaled sign of lr x (momentum step) + memory",
            recipe="momentum 0, as the authors ran EF-SignSGD (utils/hyperparameters.py of "
            "their code); the task's schedule and weight decay (the authors tuned the rate "
            "per model, tune_lr.py, without publishing the values)",
        ),
        Algorithm(
            "localsgd",
            "Local SGD",
            "Lin, Stich, Patel, Jaggi: Don't use large mini-batches, use local SGD, ICLR 2020",
            "each rank takes `period` steps on its own, then the models are averaged",
            (Option("period", "int", 4, "local steps between averagings", minimum=1),),
            centralized=False,
            reference="Lin et al.'s Algorithm 1 (local momentum SGD, parameters averaged "
            "every H steps); ours also averages batch-norm statistics",
            recipe="H = 4, mlbench's choice among the periods Lin et al. 2020 study on "
            "CIFAR-10 (they tune H per setting); the task's schedule",
        ),
        Algorithm(
            "decentralized",
            "Decentralized SGD (gossip)",
            "Lian et al.: Can decentralized algorithms outperform centralized algorithms?, "
            "NeurIPS 2017",
            "each rank steps on its own gradient and averages its model with its neighbours "
            "only (a ring, or a 2-D torus)",
            (
                Option(
                    "topology",
                    "choice",
                    "ring",
                    "who exchanges with whom",
                    choices=("ring", "torus"),
                ),
            ),
            centralized=False,
            reference="Lian et al.'s Algorithm 1 (D-PSGD): gossip with a symmetric, doubly "
            "stochastic W, then the local step",
            recipe="a ring, the topology of the paper's experiments; the task's schedule",
        ),
        # The options are the module's OPTIONS (mlbench_worker/algorithms/diloco.py), stated
        # again here because this catalogue imports no torch; tests/worker/test_diloco.py
        # checks that the two are identical.
        Algorithm(
            "diloco",
            "DiLoCo (local steps, outer Nesterov step)",
            "Douillard et al.: DiLoCo: Distributed Low-Communication Training of Language "
            "Models, arXiv:2311.08105, 2023",
            "each rank takes `period` steps with the task's optimizer on its own, then the "
            "models' mean gives a pseudo-gradient (outer model minus mean) on which an outer "
            "Nesterov momentum step updates the outer model, and every rank restarts from it",
            (
                Option("period", "int", 8, "inner steps H between two outer steps", minimum=1),
                Option("outer_lr", "float", 0.7, "the outer optimizer's learning rate", above=0.0),
                Option(
                    "outer_momentum",
                    "float",
                    0.9,
                    "the outer optimizer's momentum",
                    minimum=0.0,
                    maximum=0.999,
                ),
                Option(
                    "nesterov",
                    "choice",
                    "yes",
                    "Nesterov momentum in the outer step (the paper's) or heavy-ball momentum",
                    choices=("yes", "no"),
                ),
            ),
            centralized=False,
            reference="Douillard et al.'s Algorithm 1 (torchft's DiLoCo computes the same "
            "pseudo-gradient and outer SGD step): parameters only are sent and outer-optimised; "
            "evaluation sees the outer model, with the ranks' batch-norm statistics averaged",
            recipe="the paper's outer optimizer: Nesterov momentum, outer learning rate 0.7, "
            "momentum 0.9. Deviations: H = 8 inner steps instead of the paper's 500 (its runs "
            "take tens of thousands of steps; ours reach the light targets in tens to a few "
            "hundred, where H = 500 would never synchronise); the inner optimizer is the task's own with its schedule "
            "(the paper's is AdamW, the GPT task's too), with the task's learning rate",
        ),
        Algorithm(
            "lbfgs",
            "L-BFGS (Spark MLlib's LogisticRegression)",
            "Liu, Nocedal: On the limited memory BFGS method, Math. Programming 1989; "
            "MLlib's LogisticRegression",
            "full-batch quasi-Newton steps: every iteration, the gradient over the whole "
            "training set is tree-aggregated by Spark; `iterations` of them between "
            "evaluations, each fit starting from the last model",
            (
                Option(
                    "iterations",
                    "int",
                    5,
                    "L-BFGS iterations between two evaluations (one 'epoch')",
                    minimum=1,
                    maximum=1000,
                ),
            ),
            implementations=("spark",),
            reference="MLlib's LogisticRegression.fit (Breeze's L-BFGS, the task's L2 penalty "
            "as regParam, elasticNetParam 0, no standardisation)",
            recipe="MLlib's defaults but maxIter: `iterations` per evaluation, each fit warm-"
            "started from the last model (its curvature memory starts afresh; MLlib does not "
            "penalise the intercept)",
        ),
    )
}

# The algorithms every implementation may run (those not tied to one engine): a task's
# default list (catalogue.TaskInfo.algorithms).
GENERAL_ALGORITHMS = tuple(n for n, a in ALGORITHMS.items() if not a.implementations)


def torus_shape(workers: int) -> tuple[int, int] | None:
    """(rows, columns) of the squarest 2-D torus of `workers` ranks with at least 3 of each
    (so each rank has four different neighbours); None when there is none."""
    best = None
    for rows in range(3, math.isqrt(workers) + 1):
        if workers % rows == 0 and workers // rows >= 3:
            best = (rows, workers // rows)
    return best


def typed_options(
    name: str, declared: tuple[Option, ...], options: Mapping[str, Any] | None
) -> tuple[dict[str, Any], list[str]]:
    """`options` typed and completed with the `declared` defaults, and what is wrong: one
    rule and one wording for a built-in algorithm and an outside one (algorithm_source)."""
    values = {o.name: o.default for o in declared}
    problems: list[str] = []
    for key, raw in (options or {}).items():
        option = next((o for o in declared if o.name == key), None)
        if option is None:
            known = ", ".join(o.name for o in declared) or "none"
            problems.append(f"{name} has no option {key!r}; its options: {known}")
            continue
        value, why = option.parse(raw)
        if why:
            problems.append(why)
        else:
            values[key] = value
    return values, problems


def check(
    name: str, options: Mapping[str, Any] | None, workers: int | None = None
) -> tuple[dict[str, Any], list[str]]:
    """Options of algorithm `name` typed and completed with defaults, and what is wrong.

    `workers` (when known) is checked against what the algorithm needs: a ring needs 2
    ranks, a torus a count that makes one (3x3, 3x4, ...). An unknown algorithm is the
    caller's to refuse (it knows which ones its task admits).
    """
    values, problems = typed_options(name, ALGORITHMS[name].options, options)
    topology = values.get("topology")
    if workers is not None and name == "decentralized" and not problems:
        if topology == "ring" and workers < 2:
            problems.append("topology ring needs 2 workers or more")
        if topology == "torus" and torus_shape(workers) is None:
            problems.append(
                f"topology torus needs a worker count that is rows x columns with at least 3 "
                f"of each (9, 12, 15, 16, ...), not {workers}; use ring"
            )
    return values, problems


def options_help() -> str:
    """Every algorithm's options as `NAME KEY=VALUES`, for the command lines' help (made
    here, so no help text lists options the catalogue no longer has, or misses new ones)."""

    def values(o: Option) -> str:
        return "|".join(o.choices) if o.type == "choice" else ("N" if o.type == "int" else "F")

    return ", ".join(
        f"{a.name} " + " ".join(f"{o.name}={values(o)}" for o in a.options)
        for a in ALGORITHMS.values()
        if a.options
    )


def follows_recipe(name: str, options: Mapping[str, Any] | None) -> bool:
    """Whether a run of algorithm `name` with `options` (as stored: typed, completed) runs
    its paper's recipe, which is its defaults here. The closed division is the reference
    worker with the recipes; a run that changes an option compares in the open division."""
    algorithm = ALGORITHMS.get(name)
    if algorithm is None:
        return False
    recipe = algorithm.defaults()
    # Every option stored, as runs store them today: a run stored before an option existed
    # ran an earlier algorithm (signsgd's one scale, powersgd's first memory rule), and
    # today's defaults must not be read into it. The exception is allreduce stored bare: a
    # run from before the algorithm dimension, which summed fp32 gradients, as the recipe.
    stored = set(options or {})
    if stored != set(recipe) and not (name == DEFAULT_ALGORITHM and not stored):
        return False
    values, problems = check(name, options)
    return not problems and values == recipe


def describe(name: str, options: Mapping[str, Any] | None, every: bool = False) -> str:
    """`name` with the options that differ from the defaults, e.g. "powersgd (rank 4)", or
    with `every` option it was given ("powersgd (rank 2)"); "" for no algorithm."""
    algorithm = ALGORITHMS.get(name)
    if algorithm is None and not every:
        return name
    shown = [
        f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}"
        for k, v in sorted((options or {}).items())
        if every or (algorithm.option(k) is not None and v != algorithm.option(k).default)
    ]
    return f"{name} ({', '.join(shown)})" if name and shown else name
