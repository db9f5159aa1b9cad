"""The chaos series' checks are real: each one, fed a planted defect, fails on it, and holds
on the same data without the defect.

The run and point defects are written to a real PostgreSQL (Django's test database, with
the series' history trigger installed) the way a faulty writer would: a second final state
written over a run that ended, a measurement stored again under a new uid. The process
left behind is a real process carrying the master's marker. The evidence is then gathered
by the series' own code, so what is tested is what the series runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.chaos import invariants
from tests.chaos.evidence import Evidence, Submitted, gather, install_history, remove_history
from tests.chaos.faults import Fault
from tests.chaos.poller import Poll
from tests.chaos.victims import Victims
from tests.e2e.live import LiveMaster

pytestmark = pytest.mark.django_db(transaction=True)

TASK_1A, TASK_3 = "resnet20-cifar10", "awd-lstm-wikitext2"


@pytest.fixture
def database(transactional_db, test_database_url):
    install_history(test_database_url)
    yield test_database_url
    remove_history(test_database_url)


def _finished_run(points_file: Path, task: str = TASK_1A, evaluated: tuple = ()) -> int:
    """A run of `task` through runs.py from start to FINISHED, with three points rank 0
    measured (written to its file by the worker's own FileReporter) and stored by the
    master's one writer, and the metrics of `evaluated` reported at step 2 (an evaluation)."""
    from mlbench_master.api.models import Run
    from mlbench_master.runs import lifecycle
    from mlbench_master.runs.metrics_store import store
    from mlbench_worker.training.metric_sink import FileReporter

    run = Run.objects.create(name="chaos", task=task, state=Run.INITIALIZED)
    lifecycle.record_launch(run, {"local": {"launch_id": "first"}})
    lifecycle.mark_started(run)
    reporter = FileReporter(points_file, str(run.pk))
    points = [reporter.metric("train_loss", 2.0 - step / 10, step=step) for step in range(3)]
    points += [reporter.metric(name, 1.5, step=2) for name in evaluated]
    reporter.close()
    store([_stored(run.pk, p, p["uid"]) for p in points])
    lifecycle.mark_finished(run, 0)
    assert run.state == "FINISHED"
    return run.pk


def _stored(run_id: int, point: dict, uid: str):
    import datetime as dt

    from mlbench_master.runs.metrics_store import Point

    date = dt.datetime.fromisoformat(point["date"])
    return Point(run_id, None, point["name"], point["value"], date, False, point["metadata"], uid)


def _evidence(url: str, run_id: int, points_file: Path, task: str = TASK_1A, **extra) -> Evidence:
    submitted = [Submitted(run_id, task, str(points_file), task)]
    return gather(url, submitted, extra.pop("faults", []), extra.pop("polls", []), [], **extra)


def _violated(ev: Evidence) -> dict[str, list[str]]:
    return {name: found for name, found in invariants.check(ev).items() if found}


def test_clean_data_violates_nothing(database, tmp_path):
    points = tmp_path / "points.jsonl"
    run_id = _finished_run(points)
    assert _violated(_evidence(database, run_id, points)) == {}


def test_a_run_state_written_twice_is_caught(database, tmp_path):
    from django.utils import timezone

    from mlbench_master.api.models import Run

    points = tmp_path / "points.jsonl"
    run_id = _finished_run(points)
    # A second writer (not runs.py, which moves only from the states it expects) ends the
    # run once more.
    Run.objects.filter(pk=run_id).update(state="FAILED", reason="late", finished_at=timezone.now())
    found = _violated(_evidence(database, run_id, points))
    assert list(found) == ["one end state"], found
    said = found["one end state"]
    assert f"run {run_id}: moved FINISHED -> FAILED" in said
    assert any("a final state written 2 times" in line for line in said), said


def test_a_final_state_rewritten_in_place_is_caught(database, tmp_path):
    from django.utils import timezone

    from mlbench_master.api.models import Run

    points = tmp_path / "points.jsonl"
    run_id = _finished_run(points)
    Run.objects.filter(pk=run_id).update(state="FINISHED", finished_at=timezone.now())
    found = _violated(_evidence(database, run_id, points))
    assert list(found) == ["one end state"], found


def test_a_metric_stored_twice_is_caught(database, tmp_path):

    from mlbench_master.runs.metrics_store import store

    points = tmp_path / "points.jsonl"
    run_id = _finished_run(points)
    first = json.loads(points.read_text().splitlines()[0])
    # The same measurement posted again under a new uid (a reporter that re-made its uids).
    store([_stored(run_id, first, "another-uid")])
    found = _violated(_evidence(database, run_id, points))
    assert list(found) == ["no point stored twice"], found
    said = " ".join(found["no point stored twice"])
    assert "train_loss=2.0" in said and "stored twice" in said
    assert "1 stored points rank 0 never measured" in said


def test_a_uid_stored_twice_is_caught():
    """The database's unique uid makes this impossible there; the check must not rely on it."""
    from tests.chaos.evidence import Stored

    point = Stored(7, "u1", "train_loss", 1.0, {"step": 1}, "2026-01-01T00:00:00+00:00")
    other = Stored(7, "u1", "train_loss", 1.5, {"step": 2}, "2026-01-01T00:00:01+00:00")
    ev = Evidence([], {}, [], {7: [point, other]}, {}, {})
    assert invariants.metrics_once(ev) == ["run 7: point u1 stored 2 times"]
    assert invariants.metrics_once(Evidence([], {}, [], {7: [point]}, {}, {})) == []


def test_a_point_lost_from_a_finished_run_is_caught(database, tmp_path):
    from mlbench_master.api.models import Metric

    points = tmp_path / "points.jsonl"
    run_id = _finished_run(points)
    Metric.objects.filter(run_id=run_id, metadata__step=2).delete()
    found = _violated(_evidence(database, run_id, points))
    assert found == {
        "no point lost": [f"run {run_id} FINISHED with 1 of 3 measured points not stored"]
    }


def test_a_run_launched_twice_is_caught_unless_its_log_says_it_was_retried(database, tmp_path):
    from mlbench_master.api.models import LogChunk, Run
    from mlbench_master.runs import lifecycle

    points = tmp_path / "points.jsonl"
    run_id = _finished_run(points)
    lifecycle.record_launch(Run.objects.get(pk=run_id), {"local": {"launch_id": "second"}})
    found = _violated(_evidence(database, run_id, points))
    assert list(found) == ["no run twice"], found
    LogChunk.objects.create(
        run_id=run_id,
        seq=0,
        text="mlbench: mpirun could not open its PMIx listener; launching once more\n",
    )
    assert _violated(_evidence(database, run_id, points)) == {}


def test_a_run_lost_or_never_asked_for_is_caught(database, tmp_path):
    points = tmp_path / "points.jsonl"
    run_id = _finished_run(points)
    ev = _evidence(database, run_id, points)
    ev.submitted.append(Submitted(run_id + 1000, "python -c pass"))
    assert invariants.no_run_lost(ev) == [f"run {run_id + 1000} (python -c pass): never stored"]
    ev.submitted = []
    assert invariants.no_run_lost(ev) == [
        f"run {run_id}: stored, but the series never asked for it"
    ]


def _failed_run(reason: str) -> int:
    from mlbench_master.api.models import Run
    from mlbench_master.runs import lifecycle

    run = Run.objects.create(name="chaos", state=Run.INITIALIZED)
    lifecycle.mark_started(run)
    time.sleep(0.05)
    lifecycle.mark_failed(run, reason, exit_code=137)
    return run.pk


def _fault(kind: str, run_id: int | None, **details) -> Fault:
    now = time.time()
    return Fault(
        0, kind, 1.0, 1.0, 0.5, start=now - 0.5, end=now - 0.4, run_id=run_id, details=details
    )


def test_a_reason_that_does_not_name_the_fault_is_caught(database, tmp_path):
    run_id = _failed_run("mpirun exited with code 14; last lines of stderr: [rank 0] MPI abort")
    rank_kill = _fault("rank-kill", run_id, rank=1)
    ev = _evidence(database, run_id, tmp_path / "none.jsonl", faults=[rank_kill])
    found = invariants.reason_names_fault(ev)
    assert len(found) == 1 and "the reason names none" in found[0], found
    named = _failed_run("rank 1 exited with code 137 (killed: out of memory?)")
    ev = _evidence(
        database, named, tmp_path / "none.jsonl", faults=[_fault("rank-kill", named, rank=1)]
    )
    assert invariants.reason_names_fault(ev) == []


def test_a_failure_without_a_fault_or_after_a_survivable_one_is_caught(database, tmp_path):
    run_id = _failed_run("the run's job stopped: JobTimeoutException")
    ev = _evidence(database, run_id, tmp_path / "none.jsonl")
    assert "with no fault injected" in invariants.reason_names_fault(ev)[0]
    ev.faults = [_fault("postgres-restart", run_id)]
    assert "only faults it must survive" in invariants.reason_names_fault(ev)[0]


def test_a_process_left_behind_is_caught(tmp_path):
    """A real process carrying the master's marker, as every process of a launch does."""
    home = tmp_path / "home"
    master = LiveMaster(url="", token="", home=home, env={}, database_url="", port=0)
    victims = Victims(master)
    assert victims.leftovers() == []
    env = {**os.environ, "MLBENCH_LOCAL_CLUSTER": str(home)}
    proc = subprocess.Popen(["sleep", "60"], env=env, start_new_session=True)
    try:
        found = invariants.nothing_left(
            Evidence([], {}, [], {}, {}, {}, leftovers=victims.leftovers())
        )
        assert found == [f"left behind: process {proc.pid} sleep 60"], found
    finally:
        proc.kill()
        proc.wait()
    assert victims.leftovers() == []


def test_a_500_or_a_health_check_that_never_comes_back_is_caught():
    fault = _fault("web-kill", None)
    polls = [Poll(fault.end + 1, "/api/health/", 200), Poll(fault.end + 2, "/api/runs/", 200)]
    ev = Evidence([], {}, [], {}, {}, {}, faults=[fault], polls=polls)
    assert invariants.api_answered(ev) == []
    ev.polls = [*polls, Poll(fault.end + 3, "/api/runs/", 500, "Internal Server Error")]
    assert invariants.api_answered(ev) == [
        "GET /api/runs/ answered 500 1 times (first: 'Internal Server Error')"
    ]
    ev.polls = [Poll(fault.end + t, "/api/health/", None, "ConnectionError") for t in (1, 90)]
    assert invariants.api_answered(ev) == ["fault 0 (web-kill): no healthy answer afterwards"]
    ev.polls = [Poll(fault.end + 1, "/api/health/", 503), Poll(fault.end + 70, "/api/health/", 200)]
    assert invariants.api_answered(ev) == ["fault 0 (web-kill): healthy again 70 s after it"]


def test_a_fault_the_platform_did_not_come_back_from_is_caught():
    fault = _fault("redis-restart", None, error="AssertionError: redis was not started again")
    ev = Evidence([], {}, [], {}, {}, {}, faults=[fault])
    assert invariants.recovered(ev) == [
        "fault 0 (redis-restart): AssertionError: redis was not started again"
    ]


def test_a_grade_stored_twice_or_lost_is_caught(database, tmp_path):
    """The evaluator's grades are the master's points, not rank 0's: one per step, and one
    for every evaluation a finished run reported."""
    import datetime as dt

    from mlbench_master.api.models import Metric

    points = tmp_path / "points.jsonl"
    run_id = _finished_run(points)
    from mlbench_master.runs.metrics_store import store
    from mlbench_worker.training.metric_sink import FileReporter

    reporter = FileReporter(points, str(run_id))  # rank 0 measures an accuracy, stored
    reported = reporter.metric("val_accuracy", 0.5, step=2)
    reporter.close()
    store([_stored(run_id, reported, reported["uid"])])
    now = dt.datetime.now(dt.UTC)
    found = _violated(_evidence(database, run_id, points))
    assert found == {
        "no point lost": [
            f"run {run_id} FINISHED with evaluations never graded (steps 2): its predictions "
            "were lost"
        ]
    }, found
    grade = {"run_id": run_id, "name": "evaluated_val_accuracy", "value": 0.5, "date": now}
    Metric.objects.create(**grade, metadata={"step": 2})
    assert _violated(_evidence(database, run_id, points)) == {}  # graded: a master's point
    Metric.objects.create(**grade, metadata={"step": 2})
    found = _violated(_evidence(database, run_id, points))
    assert found == {
        "no point stored twice": [f"run {run_id}: evaluated_val_accuracy of step 2 stored 2 times"]
    }, found


@pytest.fixture
def master_home(settings, tmp_path):
    """The master's home, where model_files keeps the runs' models and their audits."""
    settings.MLBENCH_HOME = tmp_path / "home"
    return settings.MLBENCH_HOME


def _model_audited(run_id: int, since: float, **record) -> None:
    """The audit record of the run's final model, written by the master's own writer
    (model_files) as perplexity_audit.py leaves it: its status, the step it was graded at."""
    import datetime as dt

    from mlbench_master.grading import model_files

    target = model_files.folder(run_id)
    target.mkdir(parents=True)
    began = dt.datetime.fromtimestamp(since, dt.UTC).isoformat()
    model_files.write_audit(target, {"kind": "perplexity", "step": 2, "since": began, **record})


def test_a_language_model_graded_from_its_final_model_lost_nothing(database, master_home, tmp_path):
    """Task 3 posts no predictions: its evaluations' accuracies have no grade, and its final
    model's grade is the one it gets (test_sets.grades_the_model)."""
    points = tmp_path / "points.jsonl"
    run_id = _finished_run(points, TASK_3, evaluated=("val_accuracy", "val_perplexity"))
    _model_audited(run_id, time.time() - 5, status="matches", graded={"perplexity": 4.5})
    ev = _evidence(database, run_id, points, TASK_3, master_home=master_home)
    assert ev.models[run_id]["status"] == "matches"
    assert _violated(ev) == {}


def test_a_language_model_whose_model_never_arrived_is_caught(database, master_home, tmp_path):
    points = tmp_path / "points.jsonl"
    run_id = _finished_run(points, TASK_3, evaluated=("val_accuracy", "val_perplexity"))
    found = _violated(_evidence(database, run_id, points, TASK_3, master_home=master_home))
    assert found == {
        "no point lost": [
            f"run {run_id} ({TASK_3}) FINISHED, but its final model never arrived: the master "
            "holds no model of it"
        ]
    }, found


def test_a_language_model_grade_that_never_completed_is_caught_unless_a_fault_cut_it(
    database, master_home, tmp_path
):
    """A grade still "pending" after the series waited for it never completed; one whose
    master web server a fault ended after it began was cut short (the API reads it "not
    audited: interrupted"). A grade that ended without a verdict says why."""
    points = tmp_path / "points.jsonl"
    run_id = _finished_run(points, TASK_3, evaluated=("val_accuracy", "val_perplexity"))
    _model_audited(run_id, time.time() - 5, status="pending")
    ev = _evidence(database, run_id, points, TASK_3, master_home=master_home)
    (said,) = invariants.metrics_complete(ev)
    assert said.startswith(f"run {run_id} ({TASK_3}) FINISHED, but the grade of its final model ")
    assert "never completed (still pending since" in said
    ev.faults = [_fault("postgres-restart", run_id)]  # the grade does not need the database
    assert len(invariants.metrics_complete(ev)) == 1
    ev.faults = [_fault("web-kill", None)]
    assert invariants.metrics_complete(ev) == []
    ev.models[run_id] = {**ev.models[run_id], "status": "not audited", "why": "the audit failed"}
    assert invariants.metrics_complete(ev) == [
        f"run {run_id} ({TASK_3}) FINISHED, but its final model was not graded: not audited "
        "('the audit failed')"
    ]
    ev.models[run_id] = {**ev.models[run_id], "status": "mismatch", "step": 1}
    assert invariants.metrics_complete(ev) == [
        f"run {run_id} ({TASK_3}) FINISHED, but its final model was graded at step 1, not at "
        "its last evaluation (step 2)"
    ]


def test_a_predictions_graded_run_without_a_grade_still_is_caught(database, master_home, tmp_path):
    """Task 1a is graded from the predictions of each evaluation: a final model's grade
    does not stand in for a lost one."""
    points = tmp_path / "points.jsonl"
    run_id = _finished_run(points, TASK_1A, evaluated=("val_accuracy",))
    _model_audited(run_id, time.time() - 5, status="matches")
    found = _violated(_evidence(database, run_id, points, TASK_1A, master_home=master_home))
    assert found == {
        "no point lost": [
            f"run {run_id} FINISHED with evaluations never graded (steps 2): its predictions "
            "were lost"
        ]
    }, found
