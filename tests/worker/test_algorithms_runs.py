"""The algorithm options of the worker's command line, and whole runs with each algorithm.

- every algorithm reaches task 2's light target on its synthetic set with 2 ranks, and the
  run's summary and metrics carry the algorithm, its bytes per step and compression ratio;
- bad options exit with status 2 and one message naming the problem;
- the default (allreduce in fp32) is the exchange that ran before algorithms existed: a run
  with `--algorithm allreduce --algorithm-option precision=fp32` gives the same losses, bit
  for bit, as one without the flags.
"""

from __future__ import annotations

import pytest

from mlbench_worker.shared.algorithm_catalogue import ALGORITHMS, GENERAL_ALGORITHMS

from .helpers import metrics_file as _records
from .helpers import points as _points

TASK2 = ["-m", "mlbench_worker", "logreg-epsilon", "--dataset", "synthetic", "--target",
         "light", "--threads", "1", "--train-samples", "4000", "--test-samples", "1000",
         "--log-every", "8"]  # fmt: skip
FEATURES = 2000  # task 2's synthetic set: 2000 features and a bias


@pytest.mark.mpi
@pytest.mark.parametrize(
    "algorithm,options",
    [(name, []) for name in GENERAL_ALGORITHMS] + [("allreduce", ["precision=bf16"])],
)
def test_every_algorithm_reaches_task_2s_light_target(tmp_path, algorithm, options):
    from .helpers import mpirun

    out = tmp_path / "m.jsonl"
    extra = [x for o in options for x in ("--algorithm-option", o)]
    args = [*TASK2, "--metrics-file", str(out), "--algorithm", algorithm, *extra]
    proc = mpirun(2, args, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary, metrics = _records(out)
    assert summary["reached"] and summary["stop_reason"] == "target reached", summary
    assert summary["algorithm"] == algorithm
    assert summary["algorithm_options"] == {**ALGORITHMS[algorithm].defaults(),
                                            **dict(o.split("=") for o in options)}  # fmt: skip
    full = (FEATURES + 1) * 4  # one fp32 all-reduce of the gradient
    per_step = summary["comm_bytes_per_step"]
    expected = {
        "allreduce": full // 2 if options else full,
        "powersgd": full,  # one vector: sent whole (matrices only are compressed)
        "topk": 8 * -(-(FEATURES + 1) // 100),  # density 0.01: values and indices
        "signsgd": -(-(FEATURES + 1) // 8) + 4,
        "decentralized": full,  # the model, to the one neighbour of a ring of 2
    }
    period = {"localsgd": 4, "diloco": 8}.get(algorithm)  # the default periods
    if period:  # the model, every period-th step
        steps = summary["epochs"] * 16  # 2000 rows per rank, batch 128: 16 steps an epoch
        assert per_step == pytest.approx(full * (steps // period) / steps)
    else:
        assert per_step == expected[algorithm], summary
    assert summary["compression_ratio"] == pytest.approx(full / per_step)
    posted = _points(metrics, "comm_bytes")
    assert posted and all(v >= 0 for v in posted)
    if not period:
        assert set(posted) == {per_step}
    assert "comm bytes/step" in proc.stdout and "compression" in proc.stdout
    assert f"algorithm {algorithm}" in proc.stdout  # the headline names it


def _refused(proc, message: str) -> None:
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert message in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("error:") == 1  # printed once


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--algorithm", "sgdx"], "logreg-epsilon does not admit 'sgdx'; choose one of: "
         "allreduce, powersgd, topk, signsgd, localsgd, decentralized"),
        (["--algorithm", "topk", "--algorithm-option", "rank=2"],
         "topk has no option 'rank'; its options: density"),
        (["--algorithm", "powersgd", "--algorithm-option", "rank=0"], "rank must be at least 1"),
        (["--algorithm", "topk", "--algorithm-option", "density=0"],
         "density must be more than 0 and at most 1, not '0'"),
        (["--algorithm", "topk", "--algorithm-option", "density=1.01"],
         "density must be more than 0 and at most 1"),
        (["--algorithm", "localsgd", "--algorithm-option", "period=0"],
         "period must be at least 1"),
        (["--algorithm", "allreduce", "--algorithm-option", "precision=fp8"],
         "precision must be one of fp32, fp16, bf16"),
        (["--algorithm", "topk", "--algorithm-option", "density"], "must be KEY=VALUE"),
        (["--algorithm", "signsgd", "--bucket-mb", "1"], "does not apply to --algorithm signsgd"),
    ],
)  # fmt: skip
def test_bad_algorithm_options_are_refused(argv, message):
    from .helpers import run_worker

    _refused(run_worker(["logreg-epsilon", "--dataset", "synthetic", *argv]), message)


@pytest.mark.mpi
def test_a_torus_of_4_workers_is_refused_once():
    from .helpers import mpirun

    args = ["-m", "mlbench_worker", "logreg-epsilon", "--dataset", "synthetic",
            "--algorithm", "decentralized", "--algorithm-option", "topology=torus"]  # fmt: skip
    _refused(mpirun(4, args, timeout=60), "topology torus needs a worker count")


def test_one_rank_cannot_form_a_ring():
    """Without mpirun the parser does not know the worker count: set-up checks it again."""
    from .helpers import run_worker

    proc = run_worker(["logreg-epsilon", "--dataset", "synthetic", "--algorithm",
                       "decentralized", "--train-samples", "256", "--test-samples", "64"])  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "topology ring needs 2 workers or more" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.mpi
def test_the_default_is_the_fp32_allreduce_bit_for_bit(tmp_path):
    from .helpers import mpirun

    base = ["-m", "mlbench_worker", "resnet20-cifar10", "--dataset", "synthetic",
            "--train-images", "256", "--test-images", "64", "--max-epochs", "1",
            "--batch-size", "32", "--threads", "1", "--log-every", "1"]  # fmt: skip
    runs = {}
    for label, flags in [
        ("none", []),
        ("explicit", ["--algorithm", "allreduce", "--algorithm-option", "precision=fp32"]),
    ]:
        out = tmp_path / f"{label}.jsonl"
        proc = mpirun(2, [*base, "--metrics-file", str(out), *flags], timeout=120)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        runs[label] = _records(out)
    (none, m_none), (explicit, m_explicit) = runs["none"], runs["explicit"]
    losses = _points(m_none, "train_loss")
    assert len(losses) == 4  # one point per step
    assert losses == _points(m_explicit, "train_loss")
    assert _points(m_none, "val_loss") == _points(m_explicit, "val_loss")
    assert none["algorithm"] == explicit["algorithm"] == "allreduce"
    assert none["algorithm_options"] == explicit["algorithm_options"] == {"precision": "fp32"}
    assert none["compression_ratio"] == 1.0
    assert none["config"]["overlap"] and none["config"]["buckets"] == 8  # still bucketed
