"""`mlbench report` and the `mlbench run --wait` progress line count what each run's task
counts: images per second for task 1a, samples per second for task 2 (logreg-epsilon), and
never a ratio of one against the other."""

import datetime as dt

from mlbench_worker.client.cli.comparison import REPORT_METRICS, _summary_from_series, report_table
from mlbench_worker.client.cli.waiting import PROGRESS_METRICS, Progress


def _finished(run_id, workers, ttt, rate, task="resnet20-cifar10", **fields):
    """A finished run as GET /api/runs/<id>/ shows it, with the summary its task's worker
    posts (task 2: samples_per_sec where task 1a has images_per_sec)."""
    logreg = task == "logreg-epsilon"
    metric = "samples_per_sec" if logreg else "images_per_sec"
    dataset = "epsilon" if logreg else "cifar10"
    summary = {
        "task": task, "dataset": dataset, "num_workers": workers, "backend": "mpi",
        "target": "light", "target_accuracy": 0.8 if logreg else 0.7,
        "reached": ttt is not None, "time_to_target": ttt, "final_val_accuracy": 0.85,
        "elapsed": 120, metric: rate, "comm_share": 0.1,
    }  # fmt: skip
    run = {
        "id": run_id, "name": f"{task}-{workers}w", "state": "FINISHED",
        "num_workers": workers, "task": task, "backend": "mpi", "num_cpus": 1.0,
        "target": "light", "dataset": "auto", "dataset_used": dataset, "summary": summary,
    }  # fmt: skip
    return run | fields


def _header_and_cell(table: str, run_id: int, column: int = 10) -> tuple[str, str]:
    """(header, cell) of one column of the report table, by the column's index (10: the
    throughput, 11: the speed-up)."""
    lines = table.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("ID "))
    dashes = lines[top + 1]
    spans, start = [], 0
    for width in (len(d) for d in dashes.split("  ")):
        spans.append((start, start + width))
        start += width + 2
    row = next(line for line in lines[top + 2 :] if line.split()[0] == str(run_id))
    a, b = spans[column]
    return lines[top][a:b].strip(), row[a:b].strip()


def test_report_of_task_2_counts_samples():
    one = _finished(1, 1, None, 20000.0, task="logreg-epsilon")
    two = _finished(2, 2, None, 36000.0, task="logreg-epsilon")
    table = report_table(None, [one, two])
    assert _header_and_cell(table, 2) == ("SAMPLES/S", "36000")
    assert "IMAGES" not in table.upper()
    # Neither reached its target: the speed-up is the ratio of samples per second.
    assert _header_and_cell(table, 2, column=11) == ("SPEED-UP", "1.80x thr")
    assert not table.startswith("warning:")


def test_report_of_task_1a_still_counts_images():
    table = report_table(None, [_finished(1, 1, None, 300.0), _finished(2, 2, None, 540.0)])
    assert _header_and_cell(table, 2) == ("IMAGES/S", "540")
    assert _header_and_cell(table, 2, column=11)[1] == "1.80x thr"


def test_report_mixing_tasks_labels_each_row_and_compares_none_across():
    image_one = _finished(1, 1, None, 300.0)
    samples_two = _finished(2, 2, None, 36000.0, task="logreg-epsilon")
    table = report_table(None, [image_one, samples_two])
    assert _header_and_cell(table, 1) == ("THROUGHPUT", "300 images/s")
    assert _header_and_cell(table, 2) == ("THROUGHPUT", "36000 samples/s")
    # samples/s over images/s would be a number with no meaning: no speed-up, and why.
    assert _header_and_cell(table, 2, column=11)[1] == "-"
    assert "speed-up of run 2: no 1-worker run listed with the same dataset/task" in table
    warning = table.splitlines()[0]
    assert warning.startswith("warning:") and "different tasks" in warning
    # A row without a throughput says so without a unit.
    silent = _finished(3, 2, None, None, task="logreg-epsilon")
    assert _header_and_cell(report_table(None, [image_one, silent]), 3)[1] == "-"


def test_synthetic_warning_names_the_task_s_real_data_set():
    real = _finished(1, 1, 100.0, 20000.0, task="logreg-epsilon")
    fake = _finished(2, 2, 50.0, 36000.0, task="logreg-epsilon", dataset_used="synthetic")
    warning = report_table(None, [real, fake]).splitlines()[0]
    assert "say nothing about accuracy on epsilon" in warning and "CIFAR" not in warning


class _Series:
    """The one call `_summary_from_series` makes, answered with a run's metric series."""

    def __init__(self, body):
        self.body = body
        self.asked = []

    def json(self, method, run_id, **params):
        self.asked.append((method, run_id, params))
        return self.body


def test_report_without_a_summary_takes_the_mean_of_the_task_s_series():
    at = "2026-01-01T00:00:{:02d}+00:00"
    body = {
        "samples_per_sec": [{"date": at.format(s), "value": v} for s, v in ((1, 30000.0), (2, 34000.0))],
        "val_accuracy": [{"date": at.format(2), "value": 0.6}],
    }  # fmt: skip
    series = _Series(body)
    run = _finished(4, 2, None, None, task="logreg-epsilon", summary={}, state="FAILED")
    derived = _summary_from_series(series, run)
    assert derived["samples_per_sec"] == 32000.0 and "images_per_sec" not in derived
    assert "samples_per_sec" in series.asked[0][2]["metric_filter"].split(",")
    table = report_table(series, [run])
    assert _header_and_cell(table, 4) == ("SAMPLES/S", "32000")


def test_every_task_s_throughput_is_fetched():
    for metrics in (PROGRESS_METRICS, REPORT_METRICS):
        assert {"images_per_sec", "samples_per_sec"} <= set(metrics.split(","))


def _started(task):
    started = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=40)).isoformat()
    return {"id": 6, "state": "STARTED", "task": task, "time_budget": 100, "started_at": started}


def test_progress_line_counts_samples_for_task_2_and_images_for_task_1a():
    latest = {"epoch": {"value": 1.0}, "samples_per_sec": {"value": 35999.6}}
    line = Progress.render(_started("logreg-epsilon"), latest)
    assert "36000 samples/s" in line and "img" not in line and "image" not in line
    line = Progress.render(_started("resnet20-cifar10"), {"images_per_sec": {"value": 612.4}})
    assert "612 images/s" in line and "sample" not in line
    # A task this CLI does not know: read by the metric it posted.
    line = Progress.render(_started("resnet18-imagenet"), {"images_per_sec": {"value": 90.0}})
    assert "90 images/s" in line
    # Task 2 posts no images_per_sec; a stray one is not its throughput.
    line = Progress.render(_started("logreg-epsilon"), {"images_per_sec": {"value": 5.0}})
    assert "/s" not in line
