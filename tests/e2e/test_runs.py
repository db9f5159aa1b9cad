"""Runs through the whole stack: HTTP → RQ job → mpirun with 2 ranks → states, logs, metrics.

Failure cases use tiny scripts as the open-division command (fast, deterministic); the
happy path runs the real ResNet-20 worker on a small synthetic data set.
"""

import contextlib
import datetime as dt
import signal
import socket
import time

import psutil
import pytest

from tests.e2e.live import script
from tests.mllog_check import check_run_log

pytestmark = [pytest.mark.mpi, pytest.mark.slow]


def _rank_pids(master, run_id, want=2, timeout=60):
    """The pids of the run's ranks once `want` of them run (by their MPI rank)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ranks = {}
        for proc in master.rank_processes(run_id):
            env = proc.environ()
            if "OMPI_COMM_WORLD_RANK" in env and "python" in proc.name():
                ranks[int(env["OMPI_COMM_WORLD_RANK"])] = proc.pid
        if len(ranks) >= want:
            return ranks
        time.sleep(0.2)
    raise AssertionError(f"the ranks of run {run_id} did not start")


def _assert_no_process_left(master, run_id):
    left = [p for p in master.rank_processes(run_id) if p.status() != psutil.STATUS_ZOMBIE]
    assert left == [], f"processes of run {run_id} still alive: {left}"


def test_happy_path_real_worker_finishes_with_metrics_logs_and_pod_metrics(idle_master):
    master = idle_master
    command = (
        "python -m mlbench_worker resnet20-cifar10 --dataset synthetic --max-epochs 2"
        " --train-images 512 --test-images 256 --threads 1 --log-every 1"
    )
    # A price for this machine: the run copies it, and its launch records the machine.
    price = master.post("/api/prices/", {"node_kind": "local", "price_per_hour": 1.8,
                        "currency": "USD", "source": "e2e", "as_of": "2026-11-01"})  # fmt: skip
    assert price.status_code == 201, price.text
    try:
        run = master.create_run(
            name="happy",
            custom_image_command=command,
            run_all_nodes=True,
            time_limit=300,
            test_examples=256,
        )
    finally:
        master.delete(f"/api/prices/{price.json()['id']}/")
    assert run["state"] in ("INITIALIZED", "STARTED")
    done = master.wait_state(run["id"], ("FINISHED", "FAILED", "CANCELLED"), timeout=240)
    assert done["state"] == "FINISHED", done["reason"]
    assert done["exit_code"] == 0
    assert done["dataset_used"] == "synthetic"
    assert done["summary"]["num_workers"] == 2
    # Priced from its own copy (the price is gone now), by the one machine it ran on.
    cost, held = done["cost"], _seconds(done["finished_at"]) - _seconds(done["started_at"])
    assert cost["priced"] is True, cost["reason"]
    assert [(n["name"], n["node_kind"], n["workers"]) for n in cost["nodes"]] == [
        (socket.gethostname(), "local", 2)
    ]
    assert cost["whole_run"]["seconds"] == pytest.approx(held)
    assert cost["whole_run"]["cost"] == pytest.approx(held * 1.8 / 3600)

    metrics = master.get(f"/api/metrics/{run['id']}/", params={"metric_type": "run"}).json()
    for name in ("train_loss", "val_accuracy", "images_per_sec", "epoch"):
        assert metrics.get(name), f"no {name} stored: {sorted(metrics)}"
    assert 0.0 <= float(metrics["val_accuracy"][-1]["value"]) <= 1.0

    chunks = master.logs(run["id"])
    assert 0 in {c["rank"] for c in chunks}, "rank 0's output is stored, attributed to it"
    _assert_no_process_left(master, run["id"])


def test_task_2_runs_through_the_platform_by_its_task_name(idle_master, tmp_path):
    """logreg-epsilon as the API starts it (the reference command, not a custom one): no
    epsilon here, so auto falls back to synthetic data and says why. It reaches its target
    at its first (and only) evaluation; its MLPerf log shows that evaluation and passes
    MLCommons' checker, graded and as a master that cannot grade it would have it."""
    master = idle_master
    run = master.create_run(name="logreg", task="logreg-epsilon", backend="GLOO", time_budget=120)
    done = master.wait_state(run["id"], ("FINISHED", "FAILED", "CANCELLED"), timeout=240)
    assert done["state"] == "FINISHED", done["reason"]
    summary = done["summary"]
    assert (summary["task"], summary["dataset"], summary["backend"]) == (
        "logreg-epsilon", "synthetic", "gloo",
    )  # fmt: skip
    assert summary["samples_per_sec"] > 0 and "images_per_sec" not in summary
    assert summary["reached"] and summary["final_val_accuracy"] >= 0.89
    metrics = master.get(f"/api/metrics/{run['id']}/", params={"metric_type": "run"}).json()
    for name in ("train_loss", "val_accuracy", "samples_per_sec", "epoch"):
        assert metrics.get(name), f"no {name} stored: {sorted(metrics)}"
    # Graded by the platform on the generated set it regenerated: reached by the grades too.
    graded = done["evaluation"]
    assert graded["status"] == "evaluated" and graded["mismatches"] == [], graded
    assert graded["grades"] == len(metrics["val_accuracy"])
    assert graded["time_to_target"] == pytest.approx(summary["time_to_target"], abs=1e-3)
    audit = master.wait_audit(run["id"])  # the linear model's signs are the submitted ones
    assert (audit["status"], audit["differ"]) == ("matches", 0), audit
    # The time to target it reports is its evaluation's clock, as recorded with it.
    clocks = [p["metadata"]["elapsed"] for p in metrics_details(master, run["id"])]
    assert summary["time_to_target"] == clocks[0], (summary["time_to_target"], clocks)
    assert check_run_log(master.get, run["id"], tmp_path)["time_to_target"] is not None
    # The same run as a master without its test set keeps it: the worker's own points and
    # summary, no grade (what grading.intake stores then). Its log shows the same.
    drop_grades(master, run["id"])
    assert master.run(run["id"])["evaluation"]["status"] == "self-reported, not evaluated"
    assert check_run_log(master.get, run["id"], tmp_path)["time_to_target"] is not None


def metrics_details(master, run_id: int) -> list[dict]:
    body = master.get(
        f"/api/metrics/{run_id}/",
        params={"metric_type": "run", "metric_filter": "val_accuracy", "details": 1},
    ).json()
    return body["val_accuracy"]


def drop_grades(master, run_id: int) -> None:
    """Remove a run's grades from the live master's database (its tables, as stored)."""
    import psycopg

    with psycopg.connect(master.database_url, autocommit=True) as conn:
        gone = conn.execute(
            "DELETE FROM api_metric WHERE run_id = %s AND name LIKE 'evaluated\\_%%'", (run_id,)
        ).rowcount
    assert gone > 0, "the run had no grade to drop"


def test_pod_metrics_are_recorded_for_workers_in_use(idle_master):
    master = idle_master
    run = master.create_run(
        name="busy",
        custom_image_command=script("sleeper.py") + " 12",
        run_all_nodes=True,
    )
    _rank_pids(master, run["id"])
    deadline = time.monotonic() + 30
    points = {}
    while time.monotonic() < deadline and not points.get("memory_bytes"):
        time.sleep(1)
        points = master.get("/api/metrics/local-worker-1/", params={"metric_type": "pod"}).json()
    assert points.get("cpu_cores") and points.get("memory_bytes"), points
    assert float(points["memory_bytes"][-1]["value"]) > 1e6
    pods = {p["name"]: p for p in master.get("/api/pods/").json()}
    assert set(pods) == {"local-worker-0", "local-worker-1"}
    master.wait_state(run["id"], ("FINISHED",), timeout=60)


def test_worker_exiting_nonzero_fails_with_reason_and_last_lines(idle_master):
    master = idle_master
    run = master.create_run(custom_image_command=script("failing.py"), run_all_nodes=True)
    done = master.wait_state(run["id"], ("FINISHED", "FAILED", "CANCELLED"))
    assert done["state"] == "FAILED"
    assert done["exit_code"] == 3
    assert "rank 1 exited with code 3" in done["reason"]
    assert "ValueError: the data set is broken" in done["reason"]
    assert "loading data" in master.log_text(run["id"])
    _assert_no_process_left(master, run["id"])


def test_one_rank_killed_fails_the_run_quickly_and_leaves_no_process(idle_master):
    master = idle_master
    run = master.create_run(custom_image_command=script("sleeper.py") + " 120", run_all_nodes=True)
    pids = _rank_pids(master, run["id"])
    psutil.Process(pids[1]).send_signal(signal.SIGKILL)
    # The promise: FAILED within 10 s of the rank's death.
    done = master.wait_state(run["id"], ("FINISHED", "FAILED", "CANCELLED"), timeout=10)
    assert done["state"] == "FAILED"
    assert "rank 1 exited with code 137 (killed: out of memory?)" in done["reason"]
    _assert_no_process_left(master, run["id"])


def test_delete_mid_run_cancels_and_stops_every_rank(idle_master):
    master = idle_master
    run = master.create_run(custom_image_command=script("sleeper.py") + " 120", run_all_nodes=True)
    _rank_pids(master, run["id"])
    response = master.delete(f"/api/runs/{run['id']}/")
    assert response.status_code == 204, response.text
    _assert_no_process_left(master, run["id"])
    assert master.get(f"/api/runs/{run['id']}/").status_code == 404
    # The slots are free again: a new run can start at once.
    again = master.create_run(custom_image_command=script("sleeper.py") + " 0")
    assert master.wait_state(again["id"], ("FINISHED", "FAILED"))["state"] == "FINISHED"


def test_time_limit_fails_the_run_and_kills_the_ranks(idle_master):
    master = idle_master
    run = master.create_run(
        custom_image_command=script("sleeper.py") + " 120", run_all_nodes=True, time_limit=3
    )
    done = master.wait_state(run["id"], ("FINISHED", "FAILED", "CANCELLED"), timeout=60)
    assert done["state"] == "FAILED"
    assert "time limit of 3 s reached" in done["reason"]
    assert "started" in master.log_text(run["id"])
    _assert_no_process_left(master, run["id"])


def test_second_run_while_busy_is_409_and_too_many_workers_is_400(idle_master):
    master = idle_master
    run = master.create_run(custom_image_command=script("sleeper.py") + " 60")
    busy = master.post("/api/runs/", {"name": "second", "num_workers": 1})
    assert busy.status_code == 409, busy.text
    assert f"run {run['id']}" in busy.text
    master.delete(f"/api/runs/{run['id']}/")
    too_many = master.post("/api/runs/", {"name": "big", "num_workers": 3})
    assert too_many.status_code == 400
    assert "2 local worker slots" in too_many.text


def _kill_master_but_not_ranks(master):
    """What a crash does: the supervisor and its services die at once (SIGKILL)."""
    state = master.state()
    victims = [state["pid"], *state["processes"].values()]
    for pid in list(victims):  # the RQ work horse watching the run, too
        proc = _proc(pid)
        for child in proc.children(recursive=True) if proc else []:
            if "MLBENCH_LOCAL_CLUSTER" not in child.environ():
                victims.append(child.pid)
    for pid in victims:
        try:
            psutil.Process(pid).kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs([p for p in map(_proc, victims) if p], timeout=10)


def _proc(pid):
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


def test_master_restarted_during_a_run_watches_it_again(idle_master):
    master = idle_master
    run = master.create_run(custom_image_command=script("sleeper.py") + " 8", run_all_nodes=True)
    _rank_pids(master, run["id"])
    _kill_master_but_not_ranks(master)
    master.up()
    done = master.wait_state(run["id"], ("FINISHED", "FAILED", "CANCELLED"), timeout=60)
    assert done["state"] == "FINISHED", done["reason"]
    text = master.log_text(run["id"])
    assert "rank 0 done" in text and "rank 1 done" in text
    assert text.count("rank 0 started") == 1, "lines read before the restart are not stored twice"


def test_master_restarted_after_the_ranks_died_fails_the_run(idle_master):
    master = idle_master
    run = master.create_run(custom_image_command=script("sleeper.py") + " 120", run_all_nodes=True)
    _rank_pids(master, run["id"])
    _kill_master_but_not_ranks(master)
    # Everything of the launch dies at once, its sh wrapper first (lowest pid): mpirun's exit
    # code is never recorded, so the new master cannot know how the run ended.
    procs = sorted(master.rank_processes(run["id"]), key=lambda p: p.pid)
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):  # one may die with its parent first
            proc.kill()
    psutil.wait_procs(procs, timeout=10)
    master.up()
    done = master.wait_state(run["id"], ("FINISHED", "FAILED", "CANCELLED"), timeout=30)
    assert done["state"] == "FAILED"
    assert done["reason"].startswith("run lost: mpirun ended while its job was gone (a master")
    assert done["exit_code"] is None
    assert "rank 0 started" in master.log_text(run["id"]), "the output it left is stored"


def test_master_restarted_after_the_run_ended_finishes_it(idle_master):
    master = idle_master
    run = master.create_run(custom_image_command=script("sleeper.py") + " 3", run_all_nodes=True)
    _rank_pids(master, run["id"])
    _kill_master_but_not_ranks(master)
    deadline = time.monotonic() + 60
    while master.rank_processes(run["id"]):  # mpirun ends (exit 0) while no master runs
        assert time.monotonic() < deadline, "the ranks did not end"
        time.sleep(0.2)
    master.up()
    done = master.wait_state(run["id"], ("FINISHED", "FAILED", "CANCELLED"), timeout=30)
    assert done["state"] == "FINISHED", done["reason"]
    assert "rank 1 done" in master.log_text(run["id"])


def test_cancel_lets_the_runs_job_end_by_itself(idle_master):
    import redis
    from rq.job import Job

    master = idle_master
    run = master.create_run(custom_image_command=script("sleeper.py") + " 120", run_all_nodes=True)
    _rank_pids(master, run["id"])
    # A rank's process runs before it prints: under load, rank 1 could be killed before its
    # first line existed (seen in a loaded run). Cancel once both have said they started.
    deadline = time.monotonic() + 60
    while "rank 1 started" not in master.log_text(run["id"]):
        assert time.monotonic() < deadline, master.log_text(run["id"])
        time.sleep(0.2)
    response = master.post(f"/runs/{run['id']}/cancel/", {})  # the dashboard's Cancel
    assert response.status_code == 200, response.text
    assert response.json()["state"] == "CANCELLED"
    _assert_no_process_left(master, run["id"])
    job = Job.fetch(run["job_id"], connection=redis.Redis.from_url(master.state()["redis_url"]))
    deadline = time.monotonic() + 30
    while job.get_status() != "finished":  # the job ends by itself, never stopped
        assert time.monotonic() < deadline, f"the run's job is {job.get_status()}"
        time.sleep(0.2)
    # Its watcher saw CANCELLED, killed what was left and kept the output.
    assert job.return_value() == "CANCELLED"
    assert "rank 1 started" in master.log_text(run["id"])
    assert master.run(run["id"])["state"] == "CANCELLED"


def test_down_stops_a_run_in_progress_and_says_so(idle_master):
    master = idle_master
    run = master.create_run(custom_image_command=script("sleeper.py") + " 120", run_all_nodes=True)
    _rank_pids(master, run["id"])
    master.down()
    _assert_no_process_left(master, run["id"])
    assert not (master.home / "master.json").exists()
    master.up()
    done = master.run(run["id"])
    assert done["state"] == "FAILED"
    assert done["reason"] == "the master was stopped during the run"


def _seconds(iso: str) -> float:
    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
