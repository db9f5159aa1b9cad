"""The metric points are declared once (mlbench_worker/shared/metric_points.py): the reporter
refuses an undeclared name, every name the code posts or the catalogue names is declared,
and docs/metrics.rst's table is the declarations as generated."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from mlbench_worker.shared import catalogue, metric_points
from mlbench_worker.shared.evaluation import graded_name
from mlbench_worker.training.metric_sink import FileReporter, Reporter

ROOT = Path(__file__).resolve().parents[2]


def test_the_reporter_refuses_a_misspelled_name(tmp_path):
    reporter = FileReporter(tmp_path / "m.jsonl", run_id="1")
    reporter.metric("train_loss", 1.0, epoch=0.5, step=1, elapsed=2.0)
    with pytest.raises(metric_points.UnknownMetric, match="train_los.*nearest: train_loss"):
        reporter.metric("train_los", 1.0, epoch=0.5, step=1, elapsed=2.0)
    reporter.close()
    lines = (tmp_path / "m.jsonl").read_text().splitlines()
    assert len(lines) == 1 and '"train_loss"' in lines[0]  # the refused point is not written
    with pytest.raises(metric_points.UnknownMetric):
        Reporter().metric("val_acc", 0.5)


def _posted_literals() -> set[str]:
    """Every string literal passed as the first argument of a `.metric(...)` or `metric(...)`
    call in the worker's code (names built at run time are checked by the reporter)."""
    found = set()
    for path in (ROOT / "mlbench_worker").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and node.args):
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0]
            if called == "metric" and isinstance(first, ast.Constant):
                found.add(first.value)
    return found


def test_every_posted_and_catalogued_name_is_declared():
    names = _posted_literals()
    assert "averaging_started" in names  # the scan sees the trainers' literal names
    for task in catalogue.TASKS.values():
        names.add(task.throughput_metric)
        for goal in task.goals.values():
            names |= {goal.metric, graded_name(goal.metric)}
    missing = sorted(n for n in names if n not in metric_points.NAMES)
    assert not missing, f"posted or catalogued but not declared: {missing}"


def test_each_declaration_is_complete():
    for point in metric_points.POINTS:
        assert point.goal in metric_points.GOALS, point
        assert point.unit and point.meaning, point
        assert point.owner in (metric_points.RUN, metric_points.POD), point
    assert len(metric_points.NAMES) == len(metric_points.POINTS)  # no name declared twice


def test_benchmark_time_reads_the_stored_clock():
    assert metric_points.benchmark_time({"elapsed": 12.5, "epoch": 1}) == 12.5
    assert metric_points.benchmark_time({"elapsed": 3}) == 3.0
    for meta in (None, {}, {"elapsed": "12"}, {"elapsed": True}, ["elapsed"]):
        assert metric_points.benchmark_time(meta) is None


def test_the_docs_table_is_the_declarations():
    """docs/metrics.rst holds the generated table; the command rewrites it to the same text."""
    text = metric_points.DOC.read_text(encoding="utf-8")
    assert metric_points.rst() in text, (
        "docs/metrics.rst differs from the declarations: run "
        "`python -m mlbench_worker.shared.metric_points --rst`"
    )
    assert metric_points.rewritten(text) == text


def test_the_docs_check_fails_when_a_declaration_changes(monkeypatch):
    text = metric_points.DOC.read_text(encoding="utf-8")
    changed = metric_points.POINTS[0].__class__(
        "val_accuracy", "percent", "-", "target"
    )  # a unit and meaning the page does not have
    monkeypatch.setattr(metric_points, "POINTS", (changed, *metric_points.POINTS[1:]))
    assert metric_points.rst() not in text
    assert metric_points.rewritten(text) != text


def test_the_command_prints_the_table():
    out = subprocess.run(
        [sys.executable, "-m", "mlbench_worker.shared.metric_points", "--print"],
        capture_output=True, text=True, check=True, cwd=ROOT,
    ).stdout  # fmt: skip
    assert out.strip() == metric_points.rst().strip()
