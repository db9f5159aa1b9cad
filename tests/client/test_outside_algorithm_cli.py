"""`mlbench run --algorithm-file FILE` against a live master (issue 44): the file is uploaded,
the run names its hash and shows name and short hash; `mlbench download RUN --algorithm`
fetches the file back; a broken file is named with its fix before anything is sent, an
option out of its declared bounds is refused in the master's words (exit code 2)."""

from __future__ import annotations

import pytest

from mlbench_worker.client.cli.master import EXIT_USAGE
from tests.api.test_outside_algorithm import SHA, SOURCE

pytestmark = pytest.mark.mpi


def _no_active_run(master) -> None:
    for run in master.get("/api/runs/").json():
        if run["state"] in ("INITIALIZED", "STARTED", "QUEUED"):
            master.delete(f"/api/runs/{run['id']}/")


def test_the_file_is_uploaded_the_run_names_it_and_it_comes_back(master, tmp_path):
    _no_active_run(master)
    path = tmp_path / "halfavg.py"
    path.write_bytes(SOURCE)
    done = master.cli(
        "run", "outside", "--workers", "2", "--cpus", "1", "--algorithm-file", str(path),
        "--algorithm-option", "weight=0.25",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    run_id = int(done.stdout.split()[1])
    try:
        run = master.run(run_id)
        assert (run["algorithm"], run["algorithm_source"]) == ("halfavg", SHA)
        assert run["algorithm_options"] == {"weight": 0.25, "mode": "sum"}
        show = master.cli("show", str(run_id))
        shown = f"halfavg (mode sum, weight 0.25) [uploaded {SHA[:12]}]"
        assert shown in show.stdout
        report = master.cli("report", str(run_id), "--wide")
        assert report.returncode == 0 and shown in report.stdout, report.stdout + report.stderr
        out = tmp_path / "back.py"
        got = master.cli("download", str(run_id), "--algorithm", "-o", str(out))
        assert got.returncode == 0, got.stdout + got.stderr
        assert out.read_bytes() == SOURCE and SHA in got.stdout
    finally:
        master.delete(f"/api/runs/{run_id}/")


@pytest.mark.parametrize(
    "source, option, words",
    [
        (SOURCE.replace(b'NAME = "halfavg"\n', b""), [], "NAME is missing"),
        (SOURCE.replace(b"def finish", b"def begin"), [], "does not define finish"),
        (SOURCE, ["--algorithm-option", "weight=3"], "weight must be more than 0 and at most 1"),
        (SOURCE, ["--algorithm", "topk"], "is not the NAME"),
    ],
)
def test_a_refused_file_or_option_is_a_usage_error_and_starts_nothing(
    master, tmp_path, source, option, words
):
    _no_active_run(master)
    path = tmp_path / "mine.py"
    path.write_bytes(source)
    before = len(master.get("/api/runs/").json())
    done = master.cli("run", "refused", "--workers", "2", "--algorithm-file", str(path), *option)
    assert done.returncode == EXIT_USAGE, done.stdout + done.stderr
    assert words in done.stderr
    assert len(master.get("/api/runs/").json()) == before
    missing = master.cli("run", "x", "--algorithm-file", str(tmp_path / "nowhere.py"))
    assert missing.returncode == EXIT_USAGE and "--algorithm-file" in missing.stderr
