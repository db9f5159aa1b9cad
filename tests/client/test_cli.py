"""The `mlbench` command against a live master, its error paths and its exit codes."""

import datetime as dt
import subprocess
import sys
import zipfile

import pytest

from mlbench_worker.client.cli.comparison import report_table, setup_differences
from mlbench_worker.client.cli.master import (
    EXIT_AUTH,
    EXIT_CONFLICT,
    EXIT_NOT_FOUND,
    EXIT_RUN_FAILED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    Master,
)
from mlbench_worker.client.cli.waiting import Progress, latest_metrics
from tests.e2e.live import script

pytestmark = pytest.mark.mpi


def test_cli_imports_neither_torch_nor_django():
    code = (
        "import sys, mlbench_worker.client.cli, mlbench_worker.client.api, mlbench_worker.shared.home;"
        "bad = [m for m in ('torch', 'django') if m in sys.modules];"
        "sys.exit(f'imported {bad}' if bad else 0)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_run_wait_show_logs_report_download_delete(master, tmp_path):
    done = master.cli(
        "run", "cli-ok", "--workers", "2", "--command", script("sleeper.py") + " 1",
        "--all-ranks", "--wait",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FINISHED" in done.stdout
    assert f"dashboard: {master.url}/" in done.stdout
    run_id = done.stdout.split()[1]

    runs = master.cli("runs")
    assert runs.returncode == 0 and "cli-ok" in runs.stdout and "FINISHED" in runs.stdout
    show = master.cli("show", run_id)
    assert show.returncode == 0 and "exit_code" in show.stdout
    logs = master.cli("logs", run_id)
    assert "[0:out] rank 0 started" in logs.stdout and "[1:out] rank 1 done" in logs.stdout
    follow = master.cli("logs", run_id, "--follow")
    assert follow.returncode == 0 and "rank 1 done" in follow.stdout
    report = master.cli("report", run_id)
    assert report.returncode == 0 and "TIME TO TARGET" in report.stdout
    # A run without a summary: accuracy after time from the series, on the benchmark
    # clock (the val_accuracy point's date mapped through `elapsed`, start-up excluded).
    begun = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=100)
    points = [
        (name, value, begun + dt.timedelta(seconds=20 + at))
        for name, value, at in [("elapsed", 10.0, 10), ("elapsed", 40.0, 40), ("val_accuracy", 0.6, 30)]
    ]  # fmt: skip
    posted = master.post(
        "/api/metrics/",
        [
            {"run_id": run_id, "name": n, "value": v, "date": d.isoformat(), "metadata": {}}
            for n, v, d in points
        ],
    )
    assert posted.status_code == 201, posted.text
    report = master.cli("report", run_id)
    assert "60.0% @ 30s" in report.stdout, report.stdout
    latest = latest_metrics(Master(master.url, master.token), int(run_id))
    assert latest["elapsed"]["value"] == 40.0
    target = tmp_path / "m.zip"
    download = master.cli("download", run_id, "-o", str(target))
    assert download.returncode == 0 and zipfile.is_zipfile(target)
    delete = master.cli("delete", run_id)
    assert delete.returncode == 0
    gone = master.cli("show", run_id)
    assert gone.returncode == EXIT_NOT_FOUND
    assert "mlbench runs" in gone.stderr


def test_failed_run_exits_1_with_reason_and_hint(master):
    done = master.cli(
        "run", "cli-fail", "--workers", "2", "--command", script("failing.py"),
        "--all-ranks", "--wait",
    )  # fmt: skip
    assert done.returncode == EXIT_RUN_FAILED
    assert "FAILED: rank 1 exited with code 3" in done.stdout
    assert "mlbench logs" in done.stdout


def test_busy_master_is_exit_6_and_bad_input_exit_2(master):
    first = master.cli("run", "cli-long", "--workers", "1", "--command", script("sleeper.py"))
    assert first.returncode == 0, first.stderr
    run_id = first.stdout.split()[1]
    try:
        second = master.cli("run", "cli-second", "--workers", "1")
        assert second.returncode == EXIT_CONFLICT
        assert "mlbench delete" in second.stderr
    finally:
        assert master.cli("delete", run_id).returncode == 0
    too_many = master.cli("run", "cli-big", "--workers", "5")
    assert too_many.returncode == EXIT_USAGE
    assert "2 local worker slots" in too_many.stderr
    usage = master.cli("run", "no-workers", "--workers", "0")
    assert usage.returncode == 2 and "--workers" in usage.stderr


def test_unreachable_master_and_bad_token(master, tmp_path):
    env = dict(master.env, MLBENCH_URL="http://127.0.0.1:9", MLBENCH_HOME=str(tmp_path))
    down = master.cli("runs", env=env)
    assert down.returncode == EXIT_UNREACHABLE
    assert "cannot reach the master at http://127.0.0.1:9" in down.stderr
    assert "mlbench up" in down.stderr
    nothing = master.cli("runs", env=dict(master.env, MLBENCH_HOME=str(tmp_path)))
    assert nothing.returncode == EXIT_UNREACHABLE and "mlbench up" in nothing.stderr
    bad = master.cli("run", "x", "--workers", "1", env=dict(master.env, MLBENCH_TOKEN="nope"))
    assert bad.returncode == EXIT_AUTH and "MLBENCH_TOKEN" in bad.stderr


def test_status_of_the_embedded_master(master, tmp_path):
    up = master.cli("status")
    assert up.returncode == 0 and master.url in up.stdout
    again = master.cli("up", "--detach")
    assert again.returncode == 0 and "already running" in again.stdout
    none = master.cli("status", env=dict(master.env, MLBENCH_HOME=str(tmp_path)))
    assert none.returncode == 3 and "mlbench up" in none.stdout


def test_progress_line_shows_epoch_accuracy_and_eta():
    started = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=40)).isoformat()
    run = {"id": 4, "state": "STARTED", "time_budget": 100, "started_at": started}
    latest = {"epoch": {"value": 2.0}, "val_accuracy": {"value": 0.5}}
    line = Progress.render(run, latest)
    assert "epoch 2.00" in line and "val acc 50.0%" in line and "ETA ~1m00s" in line
    assert "40%" in line and "running 40s" in line
    finished = dict(run, state="FINISHED", finished_at=dt.datetime.now(dt.UTC).isoformat())
    assert "100%" in Progress.render(finished, latest)


def test_progress_line_from_the_progress_series():
    """Epoch and time come from `epoch` and `elapsed`: 60 s of start-up are not counted."""
    now = dt.datetime.now(dt.UTC)
    started = (now - dt.timedelta(seconds=100)).isoformat()
    at = (now - dt.timedelta(seconds=10)).isoformat()  # the newest points, 10 s old
    latest = {
        "epoch": {"value": 0.37, "date": at},
        "elapsed": {"value": 30.0, "date": at},
        "val_accuracy": {"value": 0.25, "date": at},
    }
    run = {"id": 5, "state": "STARTED", "started_at": started, "time_budget": 100}
    line = Progress.render(run, latest, now=now)
    assert "epoch 0.37" in line and "val acc 25.0%" in line
    assert "elapsed 40s" in line and "40%" in line and "ETA ~1m00s" in line
    assert "running" not in line
    # By epochs: 30 s for 0.37 epochs, 1.63 to go, 10 s of them already spent.
    by_epochs = dict(run, time_budget=None, max_epochs=2)
    line = Progress.render(by_epochs, latest, now=now)
    assert "epoch 0.37/2" in line and "ETA ~2m02s" in line and "18%" in line
    # Both limits: the sooner one.
    assert "ETA ~1m00s" in Progress.render(dict(run, max_epochs=2), latest, now=now)
    done = dict(run, state="FINISHED", summary={"elapsed": 95.0}, finished_at=now.isoformat())
    assert "elapsed 1m35s" in Progress.render(done, latest, now=now)


def _reported(run_id, workers, ttt, ips, dataset="cifar10", **fields):
    """A finished run as GET /api/runs/<id>/ shows it after its rank 0 posted the summary."""
    summary = {
        "task": "resnet20-cifar10", "dataset": dataset, "num_workers": workers,
        "backend": "mpi", "target": "light", "target_accuracy": 0.7, "reached": ttt is not None,
        "time_to_target": ttt, "final_val_accuracy": 0.72, "elapsed": 120,
        "images_per_sec": ips, "comm_share": 0.25,
    }  # fmt: skip
    run = {
        "id": run_id, "name": f"w{workers}", "state": "FINISHED", "num_workers": workers,
        "task": "resnet20-cifar10", "backend": "mpi", "num_cpus": 1.0, "target": "light",
        "dataset": "auto", "dataset_used": dataset, "summary": summary,
    }  # fmt: skip
    return run | fields


def _column(table: str, header: str, run_id: int) -> str:
    """One cell of the report table, by column name and run id."""
    lines = table.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("ID "))
    start = lines[top].index(header)
    row = next(line for line in lines[top + 2 :] if line.split()[0] == str(run_id))
    return row[start:].split("  ")[0].strip()


def test_report_compares_with_the_one_worker_run():
    one, two = _reported(1, 1, 100.0, 300.0), _reported(2, 2, 50.0, 550.0)
    table = report_table(None, [one, two])
    lines = table.splitlines()
    assert "SPEED-UP" in lines[0] and "COMM" in lines[0]  # no warning line above
    assert _column(table, "SPEED-UP", 1) == "1.00x"
    assert _column(table, "SPEED-UP", 2) == "2.00x"
    assert "1m40s" in lines[2] and "72.0% @ 2m00s" in lines[3] and "25.0%" in lines[3]
    assert "light (70.0%)" in lines[2]
    unreached = _reported(3, 2, None, 600.0)
    table = report_table(None, [one, unreached])
    assert "not reached" in table and _column(table, "SPEED-UP", 3) == "2.00x thr"


def test_report_never_compares_synthetic_with_cifar10():
    real, synthetic = _reported(1, 1, 100.0, 300.0), _reported(2, 2, 50.0, 550.0, "synthetic")
    table = report_table(None, [real, synthetic])
    warning = table.splitlines()[0]
    assert warning.startswith("warning:") and "cifar10, synthetic" in warning
    assert _column(table, "SPEED-UP", 2) == "-"
    assert _column(table, "DATASET", 2) == "synthetic"
    assert "speed-up of run 2: no 1-worker run listed with the same dataset" in table
    # Its own 1-worker synthetic run is a baseline; the CIFAR-10 one still is not.
    table = report_table(None, [real, synthetic, _reported(3, 1, 200.0, 150.0, "synthetic")])
    assert _column(table, "SPEED-UP", 2) == "4.00x"
    assert "speed-up of run" not in table and table.startswith("warning:")


@pytest.mark.parametrize(
    "change, differs",
    [
        ({"task": "resnet32-cifar10"}, "task"),
        ({"target": "paper"}, "target"),
        ({"backend": "gloo"}, "backend"),
        ({"num_cpus": 2.0}, "CPUs per worker"),
        ({"gpu_enabled": True}, "device"),
        ({"custom_image_command": "python my_train.py"}, "command"),
    ],
)
def test_report_speed_up_needs_the_same_set_up(change, differs):
    two = _reported(2, 2, 50.0, 550.0, **change)
    two["summary"] |= {k: v for k, v in change.items() if k in two["summary"]}
    assert setup_differences(two, _reported(1, 1, 100.0, 300.0)) == [differs]
    table = report_table(None, [_reported(1, 1, 100.0, 300.0), two])
    assert _column(table, "SPEED-UP", 2) == "-"
    assert f"no 1-worker run listed with the same {differs}" in table
    assert table.startswith("warning:") == (differs == "task")


def test_report_speed_up_without_a_baseline_or_a_known_data_set():
    table = report_table(None, [_reported(2, 2, 50.0, 550.0)])
    assert _column(table, "SPEED-UP", 2) == "-" and "speed-up of run" not in table  # alone
    table = report_table(None, [_reported(2, 2, 50.0, 550.0), _reported(3, 4, 30.0, 900.0)])
    assert _column(table, "SPEED-UP", 2) == "-" and "no 1-worker run listed" in table
    # Still running, "auto" requested, nothing reported: not comparable with anything yet.
    pending = _reported(2, 2, None, None, dataset_used="", summary={}, state="INITIALIZED")
    assert setup_differences(pending, dict(pending, id=3)) == ["dataset"]
    table = report_table(None, [_reported(1, 1, 100.0, 300.0), pending])
    assert _column(table, "DATASET", 2) == "auto (requested)"
    assert "speed-up of run 2: data set not reported yet" in table
    assert "cifar10, not reported yet" in table.splitlines()[0]
