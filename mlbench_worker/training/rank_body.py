"""The steps one rank of a training run takes, written once for every implementation.

`run(config, implementation)`: open the reporter (rank 0's reports; the others' is silent)
when the set-up asks for it, set the run up (`build`: data, model, trainer), open the
prediction sink, prepare (`before_training`: a checkpoint resumed, functions warmed up),
say the headline, train (the trainer's `fit`: the shared epoch loop of
training/progress.py, calling its `train_one_epoch` and `evaluate_and_track`), read the
benchmark clock, build the record (training/run_record.py) from the run configuration and
what the implementation measured (`facts`), report it with its table on rank 0, export the
final model (`export`, off the clock and after the summary: a task-3 model's grade repeats
the run's evaluation from it), and close the reporter, also when a step fails.

An implementation supplies only what differs (`Implementation`): the reference loop and
torch-ddp (training/run.py), TensorFlow (implementations/tensorflow/session.py) and Spark
(implementations/spark/session.py, whose body runs on rank 0, the Spark driver, while the
other ranks host the executors). How the rank ends (an error said once, or the job
aborted) is training/entry.py's.

Torch-free: the TensorFlow and Spark processes run this body too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from mlbench_worker.training.config import RunConfig
from mlbench_worker.training.metric_sink import Reporter, make_reporter
from mlbench_worker.training.prediction_sink import Collectives, open_sink
from mlbench_worker.training.progress import Progress
from mlbench_worker.training.run_record import RunFacts, run_record
from mlbench_worker.training.summary_table import summary_table

Say = Callable[[str], None]  # prints a line on rank 0 (flushed), nothing elsewhere


@dataclass
class Setup:
    """What an implementation's set-up hands to the body."""

    # fit() -> Progress, elapsed(), throughput(), goal (its accuracy), reporter, predictions
    trainer: Any
    dataset: str  # what the run evaluates on: the real set's name, or "synthetic"
    features: int | None = None  # task 2's features per row (the predictions format's)


class Implementation(Protocol):
    """What differs between the implementations of a rank's run."""

    rank: int  # this rank (0 reports)
    collectives: Collectives  # the prediction sink's bcast_object and gather_object

    def build(self, say: Say, open_reporter: Callable[[], Reporter]) -> Setup:
        """Data, model and trainer (whose reporter is `open_reporter()`'s)."""
        ...

    def before_training(self, say: Say) -> None:
        """After the sink is open, before the headline: checkpoints, warm-up."""
        ...

    def headline(self) -> str:
        """The line that says what this run trains, how and towards which goal."""
        ...

    def facts(self, progress: Progress) -> RunFacts:
        """After training: what the record needs beyond the configuration (every rank
        calls it: it may sum the ranks' timings)."""
        ...

    def footer(self, summary: dict) -> str:
        """Lines printed under the summary's table ("": none)."""
        ...

    def export(self) -> None:
        """The final model handed to the prediction sink (every rank calls it)."""
        ...


def run(config: RunConfig, implementation: Implementation) -> int:
    """One rank's run with `implementation`'s parts; 0, or raises (training/entry.py)."""
    rank0 = implementation.rank == 0
    opened: list[Reporter] = []

    def say(line: str) -> None:
        if rank0:
            print(line, flush=True)

    def open_reporter() -> Reporter:
        if rank0:
            reporter = make_reporter(
                config.master_url, config.run_id, config.token, config.metrics_file
            )
        else:
            reporter = make_reporter(None, config.run_id, None, None)
        opened.append(reporter)
        return reporter

    try:
        setup = implementation.build(say, open_reporter)
        trainer = setup.trainer
        trainer.predictions = open_sink(
            implementation.collectives,
            trainer.reporter,
            metrics_file=config.metrics_file,
            master_url=config.master_url,
            dataset=setup.dataset,
            features=setup.features,
        )
        implementation.before_training(say)
        say(implementation.headline())
        progress = trainer.fit()
        elapsed = trainer.elapsed()
        summary = run_record(
            config,
            implementation.facts(progress),
            progress,
            target_accuracy=trainer.goal.accuracy,
            throughput=trainer.throughput(),
            elapsed=elapsed,
        )
        if rank0:
            trainer.reporter.summary(summary)
            print(summary_table(summary), flush=True)
            if footer := implementation.footer(summary):
                print(footer, flush=True)
        implementation.export()
    finally:
        for reporter in opened:
            reporter.close()
    return 0
