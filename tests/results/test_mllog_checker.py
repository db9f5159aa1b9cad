"""MLPerf-format logs checked by MLCommons' own tools: the compliance checker (run as the
command a reader runs) and the result summarizer's scoring, against our statistics."""

from __future__ import annotations

import ast
import io
import zipfile
from pathlib import Path

import pytest
import yaml
from mlperf_logging.compliance_checker.mlp_parser import parse_file
from mlperf_logging.result_summarizer import result_summarizer as summarizer

from mlbench_master.results import mllog
from mlbench_master.results.mlperf_rules import OWN_RULES
from mlbench_master.results.statistics import for_series
from mlbench_worker.shared import catalogue
from tests.mllog_check import check, events

pytestmark = pytest.mark.django_db

# What the worker reports for task 1b with its default step schedule
# (mlbench_worker/tasks/imagenet/setup.py's config).
IMAGENET_CONFIG = {
    "batch_size": 256,
    "peak_lr": 0.1,
    "train_images": 1281167,
    "test_images": 50000,
    "lr_schedule": "step",
    "warmup_epochs": 5,
    "momentum": 0.9,
    "weight_decay": 0.0001,
    "decay_epochs": [30, 60, 80],
    "decay_factor": 0.1,
}
# MLPerf's closed ResNet SGD recipe: the keys its rules require (training_3.1.0/
# closed_resnet_sgd.yaml), as a run trained with it would report them.
MLPERF_RECIPE = {
    **IMAGENET_CONFIG,
    "lr_schedule": "poly",
    "momentum": 0.9,
    "weight_decay": 0.0001,
    "end_lr": 0.0001,
    "poly_power": 2,
    "decay_steps": 33000,
}
# MLPerf's closed rules want the time from the first init_start to init_stop under 30 min.


def test_checker_accepts_our_ruleset_log_and_rejects_one_without_a_required_key(maker, tmp_path):
    run = maker.run(maker.series(), 1, 2, [(10.0, 0.5, 1), (20.0, 0.86, 2)])
    text = mllog.run_log(run)
    assert text.startswith(":::MLLOG ")
    ok = check(run.task, text, tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "SUCCESS" in ok.stderr
    for key in ("eval_samples", "run_stop", "mlbench_target_accuracy"):
        cut = "\n".join(line for line in text.splitlines() if f'"key": "{key}"' not in line)
        bad = check(run.task, cut + "\n", tmp_path)
        assert bad.returncode == 1, key
        assert key in bad.stderr or "s['run_stopped']" in bad.stderr


def _shown(text: str) -> tuple[list[float], float, str]:
    """The log's eval_accuracy values, run_stop - run_start in seconds, and the status."""
    lines = events(text)
    start = next(e["time_ms"] for e in lines if e["key"] == "run_start")
    stop = next(e for e in lines if e["key"] == "run_stop")
    accuracies = [e["value"] for e in lines if e["key"] == "eval_accuracy"]
    return accuracies, round((stop["time_ms"] - start) / 1000, 6), stop["metadata"]["status"]


@pytest.mark.parametrize(
    "evals, reported, shown, stop",
    [
        # Reached at the first and only evaluation; the run's own time to target a hair
        # before its clock (a worker that kept the unrounded reading), a hair after, equal.
        ([(7.489, 0.9, 1)], 7.4886, [0.9], 7.489),
        ([(7.488, 0.9, 1)], 7.4884, [0.9], 7.488),
        ([(7.488, 0.9, 1)], None, [0.9], 7.488),
        # Several evaluations, reached at the third: the fourth is after run_stop.
        ([(10.0, 0.5, 1), (20.0, 0.7, 2), (29.9996, 0.85, 3), (40.0, 0.9, 4)], 29.99958,
         [0.5, 0.7, 0.85], 29.9996),
    ],
)  # fmt: skip
def test_a_log_stops_at_the_evaluation_that_reached_the_target(
    maker, tmp_path, evals, reported, shown, stop
):
    run = maker.run(maker.series(), 1, 2, evals, reported_ttt=reported)
    text = mllog.run_log(run)
    assert _shown(text) == (shown, stop, "success")
    ok = check(run.task, text, tmp_path)
    assert ok.returncode == 0, ok.stderr
    # The statistics use the same time to target as the log.
    assert for_series(run.series)["curves"][0]["time_to_target"] == pytest.approx(stop)


def test_the_grades_decide_which_evaluation_stops_the_log(maker, tmp_path):
    """The run says it reached 80 % at its first evaluation; the evaluator graded that one
    0.6 and the second 0.82: the log shows the grades up to the second."""
    evals = [(10.0, 0.81, 1), (20.0, 0.83, 2), (30.0, 0.9, 3)]
    run = maker.run(maker.series(), 1, 2, evals, graded=[0.6, 0.82, 0.9])
    text = mllog.run_log(run)
    assert _shown(text) == ([0.6, 0.82], 20.0, "success")
    assert check(run.task, text, tmp_path).returncode == 0


def test_checker_rejects_a_run_that_never_reached_its_target(maker, tmp_path):
    run = maker.run(maker.series(), 1, 1, [(10.0, 0.5, 1), (20.0, 0.6, 2)])
    text = mllog.run_log(run)
    assert _shown(text) == ([0.5, 0.6], 20.0, "aborted")
    result = check(run.task, text, tmp_path)
    assert result.returncode == 1
    assert "s['best'] >= s['target']" in result.stderr


def test_resnet50_log_against_mlperfs_closed_resnet_rules(maker, tmp_path):
    series = maker.series(task="resnet50-imagenet", target="standard")
    evals = [(3000.0, 0.5, 30), (6000.0, 0.762, 60)]
    kw = {"task": "resnet50-imagenet", "target": "standard", "target_value": 0.759}
    today = maker.run(series, 1, 1, evals, config=IMAGENET_CONFIG, dataset="imagenet", **kw)
    result = check(today.task, mllog.run_log(today), tmp_path)
    # The step schedule is not MLPerf's closed polynomial one: the checker says exactly
    # that (the poly schedule's keys are missing), nothing else.
    assert result.returncode == 1
    missing = {
        line.split("'")[1]
        for line in result.stderr.splitlines()
        if "Required EXACTLY_ONE occurrence" in line
    }
    assert missing == {
        "sgd_opt_end_learning_rate",
        "sgd_opt_learning_rate_decay_poly_power",
        "sgd_opt_learning_rate_decay_steps",
    }
    recipe = maker.run(series, 2, 1, evals, config=MLPERF_RECIPE, dataset="imagenet", **kw)
    result = check(recipe.task, mllog.run_log(recipe), tmp_path)
    assert result.returncode == 0, result.stderr
    assert "training_4.0.0/closed_resnet.yaml" in result.stderr


def _unzip(data: bytes, folder: Path) -> list[Path]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        archive.extractall(folder)
        return sorted(folder / name for name in archive.namelist())


def test_summarizer_score_equals_our_olympic_mean_resnet(maker, tmp_path):
    """Five seeds of task 1b, one not converging: mlperf_logging's own strong-scaling score
    (it runs the closed rules on each result file, drops the failing one as the slowest
    and takes the olympic mean, in minutes) equals our olympic mean of time to target."""
    series = maker.series(
        task="resnet50-imagenet", target="standard", seeds=[1, 2, 3, 4, 5], worker_counts=[1]
    )
    kw = {"task": "resnet50-imagenet", "target": "standard", "target_value": 0.759}
    ends = {1: 6100.0, 2: 5900.0, 3: 7000.0, 4: 6500.0}
    for seed in range(1, 6):
        reached = seed in ends
        evals = [(3000.0, 0.5, 30), (ends.get(seed, 8000.0), 0.77 if reached else 0.7, 60)]
        maker.run(series, seed, 1, evals, config=MLPERF_RECIPE, dataset="imagenet", **kw)
    files = _unzip(mllog.series_zip(series), tmp_path)
    assert [f.name for f in files] == [f"result_{i}.txt" for i in range(5)]
    folder = files[0].parent
    assert folder.relative_to(tmp_path).as_posix() == "results/mlbench-1xcpu/resnet"
    score, _, _ = summarizer._compute_strong_score_standalone(
        "resnet", "mlbench-1xcpu", False, str(folder), "training", mllog.MLPERF_RULESET
    )
    ours = for_series(series)["groups"][0]["time_to_target"]["olympic_mean"]
    assert ours == pytest.approx((6100 + 6500 + 7000) / 3)  # drop 5900 and the missing run
    assert score == pytest.approx(ours / 60)


def test_summarizer_scoring_equals_ours_on_our_ruleset(maker, tmp_path):
    """Task 2 is no MLPerf benchmark, so the summarizer's own compliance pass (MLPerf's
    benchmark list) would drop every file: its scoring functions are applied to the same
    files, with our ruleset deciding which converged, exactly as its strong-scaling score
    combines them."""
    series = maker.series(seeds=[1, 2, 3], worker_counts=[2])
    for seed, end in ((1, 20.0), (2, 26.0), (3, 23.0)):
        maker.run(series, seed, 2, [(10.0, 0.5, 1), (end, 0.85, 2)])
    files = _unzip(mllog.series_zip(series), tmp_path)
    scores, dropped = [], 0
    for f in files:
        if check("logreg-epsilon", f.read_text(), tmp_path / "check").returncode:
            dropped += 1
            continue
        lines, errors = parse_file(str(f), ruleset=mllog.MLPERF_RULESET)
        assert not errors
        scores.append(summarizer._query_mlperf_strong_scaling_score(lines))
    theirs = summarizer._compute_olympic_average(scores, dropped, 1)
    ours = for_series(series)["groups"][0]["time_to_target"]["olympic_mean"]
    assert ours == 23.0
    assert theirs == pytest.approx(ours / 60)


def test_our_ruleset_names_every_task_that_is_no_mlperf_benchmark():
    """The ruleset's list of benchmarks is the catalogue's: a task added to the catalogue
    without it would have every log refused by the checker (task 4b was, at first)."""
    (rule,) = [
        r
        for r in yaml.safe_load(OWN_RULES.read_text())
        if r.get("KEY", {}).get("NAME") == "submission_benchmark"
    ]
    listed = ast.literal_eval(rule["KEY"]["CHECK"].split(" in ", 1)[1].strip())
    trained = {name for name, info in catalogue.TASKS.items() if not info.measurement} - set(
        mllog.MLPERF_BENCHMARKS
    )
    assert sorted(listed) == sorted(trained)
