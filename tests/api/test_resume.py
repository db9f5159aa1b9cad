"""POST /api/runs/ with `resume_from`: which runs can be continued, and what the new run
records about where it started.

A parent's checkpoint is known to the master by the `checkpoint` point its rank 0 posts
after writing one (mlbench_worker/training/checkpoint.py); these tests store that point directly.
The real thing, with workers, is tests/e2e/test_resume.py.
"""

import datetime as dt

import pytest

from mlbench_master import run_rules
from mlbench_master.api.models import Metric, Run
from mlbench_master.cluster.mpirun import worker_argv
from mlbench_master.runs import lifecycle
from tests.checkpoints import IDENTITY

pytestmark = pytest.mark.django_db


def checkpoint(run, epoch, step, elapsed, when=None, **identity):
    """The point a worker posts when it has written a checkpoint of `run`."""
    return Metric.objects.create(
        run=run,
        name=run_rules.CHECKPOINT_METRIC,
        value=float(epoch),
        date=when or dt.datetime.now(dt.UTC),
        metadata={
            "epoch": epoch,
            "step": step,
            "elapsed": elapsed,
            "identity": {**IDENTITY, **identity},
        },
    )


@pytest.fixture
def parent(make_run):
    """A run of task 1a with 2 workers, cancelled after writing checkpoints at epochs 1 and 2."""
    run = make_run(state=Run.CANCELLED, num_workers=2, dataset="auto", name="long one")
    start = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    checkpoint(run, 1, 196, 61.5, when=start)
    checkpoint(run, 2, 392, 123.25, when=start + dt.timedelta(minutes=1))
    return run


def resume(api, parent_id, **fields):
    body = {"name": "again", "num_workers": 2, "resume_from": parent_id, **fields}
    return api.post("/api/runs/", body, format="json")


def test_a_cancelled_run_is_continued_from_its_last_checkpoint(api, parent, redis_settings):
    response = resume(api, parent.pk)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["resumed_from"] == parent.pk
    assert body["manifest"]["resumed_from"] == {
        "run_id": parent.pk,
        "epoch": 2,
        "step": 392,
        "elapsed": 123.25,
        "checkpoint": IDENTITY,
    }
    # "auto" might pick another data set today: the checkpoint's is the experiment.
    assert body["dataset"] == "synthetic"
    child = Run.objects.get(pk=body["id"])
    spec = lifecycle.run_spec(child, checkpoints=lambda i: f"/ckpt/run-{i}")
    assert spec.checkpoint_dir == f"/ckpt/run-{child.pk}"
    assert spec.resume_dir == f"/ckpt/run-{parent.pk}"
    argv = worker_argv(spec)
    assert "--resume" in argv
    assert argv[argv.index("--resume-from") + 1] == f"/ckpt/run-{parent.pk}"
    assert argv[argv.index("--checkpoint-dir") + 1] == f"/ckpt/run-{child.pk}"
    assert argv[argv.index("--dataset") + 1] == "synthetic"
    # The list shows it too, so a resumed result is never taken for one from scratch.
    listed = {r["id"]: r for r in api.get("/api/runs/").json()}
    assert listed[child.pk]["resumed_from"] == parent.pk
    assert listed[parent.pk]["resumed_from"] is None


def test_a_failed_run_can_be_resumed_and_settings_other_than_the_identity_may_change(
    api, make_run, redis_settings
):
    failed = make_run(state=Run.FAILED, num_workers=2, reason="time limit of 9000 s reached")
    checkpoint(failed, 4, 800, 250.0)
    response = resume(
        api,
        failed.pk,
        backend="gloo",
        num_cpus=2,
        target="light",
        max_epochs=10,
        time_budget=600,
        dataset="synthetic",
    )
    assert response.status_code == 201, response.json()
    assert response.json()["manifest"]["resumed_from"]["epoch"] == 4


@pytest.mark.parametrize(
    "state, fields, words",
    [
        (Run.CANCELLED, {"num_workers": 1}, ["num_workers 2", "num_workers is 1"]),
        (Run.CANCELLED, {"task": "resnet32-cifar10"}, ["task 'resnet20-cifar10'"]),
        (Run.CANCELLED, {"dataset": "cifar10"}, ["dataset 'synthetic'", "'cifar10'"]),
        (Run.FINISHED, {}, ["is FINISHED", "only a FAILED or CANCELLED run"]),
    ],
)
def test_a_checkpoint_the_worker_would_refuse_is_a_400(
    api, make_run, redis_settings, state, fields, words
):
    run = make_run(state=state, num_workers=2)
    checkpoint(run, 1, 196, 61.5)
    response = resume(api, run.pk, **fields)
    assert response.status_code == 400, response.json()
    message = response.json()["errors"]["resume_from"][0]
    for word in words:
        assert word in message
    assert Run.objects.count() == 1  # nothing stored


def test_a_model_or_batch_size_the_task_does_not_have_is_refused(api, make_run, redis_settings):
    run = make_run(state=Run.FAILED, num_workers=2)
    checkpoint(run, 1, 100, 30.0, batch_size=64)  # e.g. written by `--batch-size 64` by hand
    response = resume(api, run.pk)
    assert response.status_code == 400
    assert "batch_size 64" in response.json()["errors"]["resume_from"][0]


def test_no_such_run_no_checkpoint_or_a_custom_command_is_a_400(
    api, staff_api, make_run, redis_settings
):
    response = resume(api, 987654)
    assert response.status_code == 400
    assert "there is no run 987654" in response.json()["errors"]["resume_from"][0]

    early = make_run(state=Run.FAILED, num_workers=2)  # died before its first epoch ended
    response = resume(api, early.pk)
    assert response.status_code == 400
    assert "wrote no checkpoint" in response.json()["errors"]["resume_from"][0]
    other = make_run(state=Run.FAILED, num_workers=2)
    checkpoint(other, 1, 10, 5.0)  # another run's checkpoint is not this one's
    assert resume(api, early.pk).status_code == 400
    # A resumed run that failed before its own first checkpoint points back to its parent.
    again = make_run(state=Run.FAILED, num_workers=2, resumed_from=other.pk)
    response = resume(api, again.pk)
    assert response.status_code == 400
    assert f"resume run {other.pk} instead" in response.json()["errors"]["resume_from"][0]

    command = make_run(state=Run.FAILED, num_workers=2, custom_image_command="python t.py")
    checkpoint(command, 1, 10, 5.0)
    response = resume(api, command.pk)
    assert response.status_code == 400
    assert "custom command" in response.json()["errors"]["resume_from"][0]

    response = resume(staff_api, other.pk, custom_image_command="python t.py")
    assert response.status_code == 400
    assert "custom command" in response.json()["errors"]["resume_from"][0]

    response = resume(api, "abc")
    assert response.status_code == 400 and "resume_from" in response.json()["errors"]
    assert Run.objects.count() == 4


def test_a_parent_deleted_after_validation_is_still_refused(make_run, redis_settings, monkeypatch):
    """The parent is read again inside the transaction that stores the child: deleted
    between the rules' check and the insert, the child is refused, not created."""
    gone = make_run(state=Run.FAILED, num_workers=2)
    checkpoint(gone, 1, 10, 5.0)
    gone_id = gone.pk
    resolve = run_rules.resolve

    def resolve_then_delete(filled, user, cluster):
        fields = resolve(filled, user, cluster)
        Run.objects.filter(pk=gone_id).delete()
        return fields

    monkeypatch.setattr(run_rules, "resolve", resolve_then_delete)
    with pytest.raises(run_rules.ResumeRefused, match=f"no run {gone_id}"):
        lifecycle.create_run({"name": "late", "num_workers": 2, "resume_from": gone_id})
    assert Run.objects.count() == 0


def test_deleting_a_run_deletes_its_checkpoints_but_not_the_childs_record(
    api, parent, redis_settings, tmp_path
):
    folder = tmp_path / "checkpoints" / f"run-{parent.pk}"  # the local driver's (conftest)
    folder.mkdir(parents=True)
    (folder / "checkpoint.pt").write_bytes(b"weights")
    child = resume(api, parent.pk).json()
    # While the child is active (its worker copies the checkpoint when it starts), the
    # parent's folder stays.
    assert api.delete(f"/api/runs/{parent.pk}/").status_code == 204
    assert (folder / "checkpoint.pt").exists()
    assert api.delete(f"/api/runs/{child['id']}/").status_code == 204

    lone = Run.objects.create(name="lone", state=Run.FAILED, num_workers=2)
    lone_folder = tmp_path / "checkpoints" / f"run-{lone.pk}"
    lone_folder.mkdir(parents=True)
    (lone_folder / "checkpoint.pt").write_bytes(b"weights")
    checkpoint(lone, 1, 10, 5.0)
    kept = resume(api, lone.pk).json()
    lifecycle.mark_failed(Run.objects.get(pk=kept["id"]), "stopped")
    assert api.delete(f"/api/runs/{lone.pk}/").status_code == 204
    assert not lone_folder.exists()  # nothing can resume a deleted run
    assert api.get(f"/api/runs/{kept['id']}/").json()["resumed_from"] == lone.pk


def test_a_resumed_run_takes_every_field_it_leaves_out_from_its_parent(
    api, make_run, redis_settings
):
    """The lifecycle fills them in (run_rules.resolve), not the page that asks: the Resume
    button and `mlbench run --resume-from` send no more than a name and the parent's id."""
    parent = make_run(
        state=Run.FAILED, num_workers=2, num_cpus=1.5, max_bandwidth=100, latency=20.0,
        backend="gloo", light_target=True, target="light", dataset="synthetic",
        max_epochs=30, time_budget=60.0, time_limit=60 + run_rules.TIME_LIMIT_MARGIN,
        algorithm="topk", algorithm_options={"density": 0.05},
    )  # fmt: skip
    checkpoint(parent, 1, 196, 30.0, dataset="synthetic", algorithm="topk",
               algorithm_options={"density": 0.05})  # fmt: skip
    response = api.post("/api/runs/", {"name": "again", "resume_from": parent.pk}, format="json")
    assert response.status_code == 201, response.json()
    child = response.json()
    for name in run_rules.INHERITED + ("time_budget", "time_limit"):
        assert child[name] == getattr(parent, name), name
    assert child["latency"] == 20.0 and child["effective_time_budget"] == 60.0
    assert child["manifest"]["setup"]["latency"] == 20.0


def test_what_a_resumed_run_asks_for_wins_and_its_times_are_derived_anew(
    api, make_run, redis_settings
):
    parent = make_run(state=Run.CANCELLED, num_workers=2, latency=5.0, time_budget=60.0,
                      time_limit=60 + run_rules.TIME_LIMIT_MARGIN)  # fmt: skip
    checkpoint(parent, 1, 196, 30.0)
    body = {"name": "longer", "resume_from": parent.pk, "latency": 0, "time_budget": 3000}
    child = api.post("/api/runs/", body, format="json").json()
    assert child["latency"] is None  # 0 ms asked: no delay
    assert (child["time_budget"], child["time_limit"]) == (3000, 3000 + run_rules.TIME_LIMIT_MARGIN)


def test_a_parents_value_todays_limits_refuse_is_named_as_the_parents(
    api, make_run, settings, redis_settings
):
    parent = make_run(state=Run.FAILED, num_workers=2, max_bandwidth=5000)
    checkpoint(parent, 1, 196, 30.0)
    settings.MLBENCH_MAX_BANDWIDTH = 1000
    response = api.post("/api/runs/", {"name": "x", "resume_from": parent.pk}, format="json")
    assert response.status_code == 400
    message = response.json()["errors"]["max_bandwidth"][0]
    assert f"the value of run {parent.pk}" in message and "give max_bandwidth" in message
    assert api.post(
        "/api/runs/", {"name": "x", "resume_from": parent.pk, "max_bandwidth": 1000},
        format="json",
    ).status_code == 201  # fmt: skip


def test_a_resumed_run_given_a_limit_keeps_its_parents_budget(api, make_run, redis_settings):
    parent = make_run(state=Run.FAILED, num_workers=2, time_budget=60.0,
                      time_limit=60 + run_rules.TIME_LIMIT_MARGIN)  # fmt: skip
    checkpoint(parent, 1, 196, 30.0)
    body = {"name": "x", "resume_from": parent.pk, "time_limit": 5000}
    child = api.post("/api/runs/", body, format="json").json()
    assert (child["time_budget"], child["time_limit"]) == (60.0, 5000)
    too_short = {"name": "x", "resume_from": parent.pk, "time_limit": 100}
    errors = api.post("/api/runs/", too_short, format="json").json()["errors"]
    assert set(errors) == {"time_limit", "time_budget"}
    assert f"the value of run {parent.pk}" in errors["time_budget"][0]
    assert f"the value of run {parent.pk}" not in errors["time_limit"][0]


def test_asking_for_one_of_a_linked_pair_drops_the_parents_other(api, make_run, redis_settings):
    """A light-target parent resumed towards the standard goal: the parent's light_target
    would contradict the target asked for, so neither of the two is inherited."""
    parent = make_run(state=Run.FAILED, num_workers=2, light_target=True, target="light")
    checkpoint(parent, 1, 196, 30.0)
    body = {"name": "x", "resume_from": parent.pk, "target": "standard"}
    response = api.post("/api/runs/", body, format="json")
    assert response.status_code == 201, response.json()
    assert (response.json()["target"], response.json()["light_target"]) == ("standard", False)


def test_an_inherited_limit_todays_maximum_refuses_says_it_is_the_parents(
    api, make_run, settings, redis_settings
):
    parent = make_run(state=Run.FAILED, num_workers=2, time_limit=8100)
    checkpoint(parent, 1, 196, 30.0)
    settings.MLBENCH_MAX_TIME_LIMIT = 3600
    body = {"name": "x", "resume_from": parent.pk}
    errors = api.post("/api/runs/", body, format="json").json()["errors"]
    assert f"the value of run {parent.pk}" in errors["time_limit"][0]
