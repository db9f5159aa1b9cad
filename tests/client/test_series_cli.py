"""`mlbench run NAME --seeds 1,2 --workers 1,2` (and the original `mlbench run NAME 1 2`)
queue a series on a live master, `mlbench runs` shows each queued run's place, `mlbench
series` lists, shows and cancels it, and the ApiClient does the same; bad input is a usage
error that stores nothing."""

import pytest

from mlbench_worker.client.cli.master import EXIT_CONFLICT, EXIT_NOT_FOUND, EXIT_USAGE

pytestmark = pytest.mark.mpi

# A command that waits, so the series' first run stays active while the test looks.
SLOW = ["--command", "sleep 60", "--cpus", "1"]


def _idle(master):
    listed = master.get("/api/runs/").json()
    for states in (("QUEUED",), ("INITIALIZED", "STARTED")):
        for run in listed:
            if run["state"] in states:
                master.delete(f"/api/runs/{run['id']}/")


def _series_id(stdout: str) -> int:
    line = next(x for x in stdout.splitlines() if x.startswith("series "))
    return int(line.split()[1])


def test_a_series_from_the_command_line_is_listed_shown_and_cancelled(master):
    _idle(master)
    done = master.cli("run", "cli series", "--seeds", "1,2", "--workers", "1,2", *SLOW)
    assert done.returncode == 0, done.stdout + done.stderr
    series_id = _series_id(done.stdout)
    body = master.get(f"/api/series/{series_id}/").json()
    assert (body["seeds"], body["worker_counts"]) == ([1, 2], [1, 2])
    assert "QUEUED #1" in done.stdout and "QUEUED #3" in done.stdout
    listed = master.cli("runs")
    assert "QUEUED #3" in listed.stdout, listed.stdout
    assert f"{series_id} " in master.cli("series").stdout
    shown = master.cli("series", str(series_id))
    assert shown.returncode == 0 and "SEED" in shown.stdout and "QUEUED #2" in shown.stdout
    cancelled = master.cli("series", str(series_id), "--cancel")
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    states = [r["state"] for r in master.get(f"/api/series/{series_id}/").json()["runs"]]
    assert states == ["CANCELLED"] * 4, states
    again = master.cli("series", str(series_id), "--cancel")
    assert again.returncode == EXIT_CONFLICT
    assert "no queued or active run" in again.stderr
    # What to do next is about the series, not a run (it suggested `mlbench delete RUN`).
    assert f"`mlbench delete --series {series_id}`" in again.stderr, again.stderr
    assert "delete RUN" not in again.stderr

    deleted = master.cli("delete", "--series", str(series_id))
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    assert f"series {series_id} 'cli series' deleted with its 4 runs\n" == deleted.stdout
    assert master.get(f"/api/series/{series_id}/").status_code == 404
    members = [r["id"] for r in body["runs"]]
    assert not [r for r in master.get("/api/runs/").json() if r["id"] in members]
    # A series that does not exist points to the list of series, not of runs.
    for args in (["series", str(series_id)], ["delete", "--series", str(series_id)]):
        gone = master.cli(*args)
        assert gone.returncode == EXIT_NOT_FOUND, gone.stderr
        assert f"series {series_id} does not exist (`mlbench series` lists them)" in gone.stderr
        assert "mlbench runs" not in gone.stderr
    for args in ([], ["1", "--series", "1"]):
        usage = master.cli("delete", *args)
        assert usage.returncode == EXIT_USAGE and "a RUN or --series ID" in usage.stderr


def test_the_original_form_and_the_queue_flag(master):
    _idle(master)
    done = master.cli("run", "original", "1", "2", *SLOW)
    assert done.returncode == 0, done.stdout + done.stderr
    series_id = _series_id(done.stdout)
    assert master.get(f"/api/series/{series_id}/").json()["worker_counts"] == [1, 2]
    plain = master.cli("run", "plain", "--workers", "1", *SLOW)
    assert plain.returncode != 0 and "queue" in plain.stderr
    queued = master.cli("run", "waits", "--workers", "1", "--seeds", "7", "--queue", *SLOW)
    assert queued.returncode == 0 and "QUEUED #2, seed 7" in queued.stdout, queued.stdout
    # Deleting the series while its first run is active stops that run first.
    active = master.get(f"/api/series/{series_id}/").json()["runs"][0]["id"]
    deleted = master.cli("delete", "--series", str(series_id))
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    assert f"deleted with its 2 runs; its active run {active} was stopped first" in deleted.stdout
    assert master.get(f"/api/runs/{active}/").status_code == 404
    _idle(master)


@pytest.mark.parametrize(
    "options, words",
    [
        (["--seeds", "1,1", "--workers", "1"], "--seeds: give each value once"),
        (["--seeds", "1,x"], "not a comma-separated list"),
        (["--seeds", "1,2", "--repeats", "2"], "not both"),
        (["--workers", "1,9"], "9 workers"),
        (["--repeats", "0"], "at least 1"),
        (["3", "--workers", "1,2"], "give the worker counts once"),
    ],
)
def test_bad_series_input_is_a_usage_error_and_stores_nothing(master, options, words):
    _idle(master)
    before = len(master.get("/api/runs/").json()), len(master.get("/api/series/").json())
    done = master.cli("run", "refused", *options, *SLOW)
    assert done.returncode == EXIT_USAGE, done.stdout + done.stderr
    assert words in done.stderr
    after = len(master.get("/api/runs/").json()), len(master.get("/api/series/").json())
    assert after == before


def test_the_client_creates_lists_gets_and_cancels_a_series(master):
    from mlbench_worker.client.api import ApiClient

    _idle(master)
    client = ApiClient(url=master.url, token=master.token, in_cluster=False)
    created = client.create_series(
        "client series", repeats=2, workers=[1], custom_image_command="sleep 60", num_cpus=1
    ).result()
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["seeds"] == [1, 2]
    assert body["id"] in [s["id"] for s in client.list_series().result().json()]
    detail = client.get_series(body["id"]).result().json()
    assert [g["num_workers"] for g in detail["statistics"]["groups"]] == [1]
    assert client.cancel_series(body["id"]).result().status_code == 200
    refused = client.create_series("bad", seeds=[], workers=[1]).result()
    assert refused.status_code == 400 and "seeds" in refused.json()["errors"]
    assert client.get_series(99999).result().status_code == 404
    assert client.delete_series(body["id"]).result().status_code == 204
