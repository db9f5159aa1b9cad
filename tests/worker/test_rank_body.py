"""One rank body for every implementation (training/rank_body.py).

- The body takes its steps once each, in order, with an implementation that supplies only
  what differs: the reporter opened when the set-up asks (rank 0's to the metrics file, the
  others' silent), the prediction sink opened for the trainer, the record built by
  run_record and reported by rank 0 with its table, the model exported after it, the
  reporter closed also when training fails.
- The five implementations supply that interface: the reference loop and torch-ddp
  (training/run.py's ReferenceRank), TensorFlow (TensorFlowRank), Spark (SparkDriver), Flink
  (FlinkDriver); that each real run goes through the body once per rank (once on the Spark
  driver, once on Flink's client) is checked by the runs of tests/worker/test_ddp.py,
  test_tensorflow_run.py, test_spark_run.py and test_flink_run.py (helpers.RANK_BODY_SPY).
- The body and the record stay torch-free (tests/test_worker_rooms.py: the TensorFlow and
  Spark processes run them).
"""

from __future__ import annotations

import importlib
import inspect
import json

import pytest

from mlbench_worker.training import rank_body
from mlbench_worker.training.options import parse_args
from mlbench_worker.training.progress import Progress
from mlbench_worker.training.recipe import Goal
from mlbench_worker.training.run_record import RunFacts, run_record

ARGV = ["resnet20-cifar10", "--dataset", "synthetic", "--seed", "4", "--max-epochs", "3"]
# The implementation classes, by the module that holds each, and the implementations they run.
IMPLEMENTATIONS = {
    "mlbench_worker.training.run:ReferenceRank": ("reference", "torch-ddp"),
    "mlbench_worker.implementations.tensorflow.session:TensorFlowRank": ("tensorflow",),
    "mlbench_worker.implementations.spark.session:SparkDriver": ("spark",),
    # Importable without pyflink (which lives in .venv-flink): it is imported when a job starts.
    "mlbench_worker.implementations.flink.flink_session:FlinkDriver": ("flink",),
}
MEMBERS = ("build", "before_training", "headline", "facts", "footer", "export")


class Solo:
    rank = 0

    def bcast_object(self, obj, root=0):
        return obj

    def gather_object(self, obj, root=0):
        return [obj]


class FakeTrainer:
    def __init__(self, reporter, calls, fail=False):
        self.reporter, self.calls, self.fail = reporter, calls, fail
        self.goal = Goal("standard", 0.8, 3)
        self.predictions = None
        self.progress = Progress(epochs_done=3.0, val_accuracy=0.5, best_val_accuracy=0.6,
                                 stop_reason="max epochs done")  # fmt: skip

    def fit(self):
        self.calls.append("fit")
        if self.fail:
            raise RuntimeError("a rank crashed")
        return self.progress

    def elapsed(self):
        return 12.5

    def throughput(self):
        return 100.0


FACTS = RunFacts(
    dataset="synthetic", dataset_note="generated", num_workers=1, backend="mpi", device="cpu",
    threads=1, peak_lr=0.1, comm_share=0.0, comm_share_total=0.0, comm_bytes_per_step=0.0, comm_bytes_to_target=None,
    full_allreduce_bytes=0, versions={"python": "3", "mpi": "-", "mlbench": "-"},
    hardware={"cpu_count": 1},
    config={"amp": False},
)  # fmt: skip


class FakeImplementation:
    def __init__(self, rank=0, fail=False):
        self.rank, self.collectives, self.fail = rank, Solo(), fail
        self.calls: list[str] = []
        self.reporters = []

    def build(self, say, open_reporter):
        self.calls.append("build")
        say("built")
        reporter = open_reporter()
        self.reporters.append(reporter)
        closing = reporter.close

        def close():
            self.calls.append("close")
            closing()

        reporter.close = close
        self.trainer = FakeTrainer(reporter, self.calls, self.fail)
        return rank_body.Setup(self.trainer, "synthetic")

    def before_training(self, say):
        self.calls.append("before_training")
        assert self.trainer.predictions is not None  # the sink is open by now

    def headline(self):
        self.calls.append("headline")
        return "HEADLINE"

    def facts(self, progress):
        self.calls.append("facts")
        return FACTS

    def footer(self, summary):
        self.calls.append("footer")
        return "FOOTER"

    def export(self):
        self.calls.append("export")


def test_the_body_takes_each_step_once_in_order_and_rank_0_reports(tmp_path, capsys):
    metrics = tmp_path / "m.jsonl"
    config = parse_args([*ARGV, "--metrics-file", str(metrics)])
    implementation = FakeImplementation()
    assert rank_body.run(config, implementation) == 0
    assert implementation.calls == ["build", "before_training", "headline", "fit", "facts",
                                    "footer", "export", "close"]  # fmt: skip
    out = capsys.readouterr().out
    assert out.index("built") < out.index("HEADLINE") < out.index("mlbench result")
    assert out.index("mlbench result") < out.index("FOOTER")
    (summary,) = [json.loads(x) for x in metrics.read_text().splitlines() if '"summary"' in x]
    trainer = implementation.trainer
    expected = run_record(config, FACTS, trainer.progress, target_accuracy=0.8,
                          throughput=100.0, elapsed=12.5)  # fmt: skip
    assert {k: v for k, v in summary.items() if k != "type"} == expected
    assert trainer.predictions.enabled and trainer.predictions.dataset == "synthetic"
    assert trainer.predictions.folder == tmp_path.resolve() / "predictions"


def test_another_rank_reports_nothing_and_a_failure_still_closes_the_reporter(tmp_path, capsys):
    metrics = tmp_path / "m.jsonl"
    config = parse_args([*ARGV, "--metrics-file", str(metrics)])
    quiet = FakeImplementation(rank=1)
    assert rank_body.run(config, quiet) == 0
    assert not metrics.exists() and capsys.readouterr().out == ""
    assert quiet.calls[-1] == "close"
    failing = FakeImplementation(fail=True)
    with pytest.raises(RuntimeError, match="a rank crashed"):
        rank_body.run(config, failing)
    assert failing.calls == ["build", "before_training", "headline", "fit", "close"]


@pytest.mark.parametrize("where", sorted(IMPLEMENTATIONS))
def test_each_implementation_supplies_the_interface(where):
    module_name, _, name = where.partition(":")
    if "tensorflow" in module_name:
        pytest.importorskip("tensorflow")
    if "spark" in module_name:
        pytest.importorskip("pyspark")
    module = importlib.import_module(module_name)
    cls = getattr(module, name)
    for member in MEMBERS:
        theirs = inspect.signature(getattr(cls, member)).parameters
        ours = inspect.signature(getattr(rank_body.Implementation, member)).parameters
        assert list(theirs) == list(ours), (where, member)
    # The module hands its rank to the one body (through the module, so a spy sees it).
    source = inspect.getsource(module)
    assert source.count("rank_body.run(") == 1, where
    assert "training_summary(" not in source and "open_sink(" not in source


def test_every_training_implementation_has_its_class():
    from mlbench_worker.shared import implementation_catalogue

    named = {impl for impls in IMPLEMENTATIONS.values() for impl in impls}
    assert named == set(implementation_catalogue.IMPLEMENTATIONS)
