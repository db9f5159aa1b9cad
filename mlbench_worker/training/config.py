"""One rank's run configuration: the training command line, parsed and checked once, typed.

Why a dataclass and not argparse's namespace: the options travel from the parser through
the set-up, the task's set-up, the trainer, the gradient exchange and the reporter. A
namespace lets any of them read a name the parser never made (and fall back with getattr
when a hand-built one lacked it), and says nothing of types. `RunConfig` is the declared
list: options.parse_args returns one, frozen, and every option's default (a task's own
included) is filled in there, so no reader needs a fallback.

Torch-free: the TensorFlow implementation reads the same configuration.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RunConfig:
    # The benchmark: what is trained, towards which goal, on what.
    task: str
    model: str  # the task's default unless --model
    target: str  # a goal of the task's catalogue entry
    dataset: str  # auto, the task's real data set, or synthetic
    time_budget: float | None  # training seconds on the benchmark clock (None: no budget)
    max_epochs: int  # the task's unless given
    batch_size: int  # per worker; the task's unless given
    lr: float | None  # peak learning rate (None: the task's scaling rule)
    seed: int
    # Task family options (None: the family's default, or not this family's).
    l2: float | None  # task 2
    lr_schedule: str | None  # task 1b
    label_smoothing: float | None  # task 1b
    zero_init_residual: bool | None  # task 1b
    crop: int | None  # task 1b smoke tests
    data_workers: int | None  # task 1b
    amp_dtype: str | None  # task 1b with --amp
    vocab_size: int | None  # task 3, synthetic data
    train_images: int | None  # a prefix of the training set (smoke tests)
    test_images: int | None
    # How ranks combine their work, and with which code.
    algorithm: str
    algorithm_option: list[str]  # as given: KEY=VALUE
    algorithm_options: dict[str, Any]  # checked and complete (the algorithm catalogue's)
    # An uploaded algorithm's SHA-256 (fetched from the master; None: built-in or installed).
    algorithm_source: str | None
    algorithm_stall_seconds: float | None  # the stall watchdog's floor (algorithm_guard.py)
    implementation: str
    backend: str
    device: str  # auto, cpu or cuda
    threads: int | None  # compute threads per rank (None: environment.default_threads)
    amp: bool
    channels_last: bool
    no_overlap: bool
    bucket_mb: float | None
    # Where data, checkpoints and metrics go.
    data_dir: str
    checkpoint_dir: str | None
    resume: bool
    resume_from: str | None
    master_url: str | None
    run_id: str | None
    token: str | None = field(repr=False)  # the run's worker token (from the environment)
    metrics_file: str | None
    log_every: int

    @classmethod
    def from_namespace(cls, parsed: argparse.Namespace) -> RunConfig:
        """The configuration of a parsed and checked command line; a parser that made a
        name this class lacks, or missed one, is a bug, said at once."""
        names = {f.name for f in dataclasses.fields(cls)}
        given = vars(parsed)
        if set(given) != names:
            raise TypeError(
                "the training parser and RunConfig disagree: "
                f"only parsed {sorted(set(given) - names)}, never parsed {sorted(names - set(given))}"
            )
        return cls(**given)

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with `changes` (tests and benchmarks vary one setting of a parsed run)."""
        return dataclasses.replace(self, **changes)
