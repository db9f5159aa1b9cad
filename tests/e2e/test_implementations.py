"""Each implementation through the whole stack: POST /api/runs/ with `implementation` → the
job's mpirun command → the worker's own code (our loop, DistributedDataParallel, Keras under
MultiWorkerMirroredStrategy) → metrics and summary posted back → FINISHED; and a rank killed
mid-run fails the run with a reason within 10 s, with no process left."""

import time

import psutil
import pytest

from tests.e2e.live import E2E_AUDIT_SAMPLE

pytestmark = [pytest.mark.mpi, pytest.mark.slow]
# The reference too, as a task run asks for it (test_runs.py drives it by custom commands).
IMPLEMENTATIONS = ["reference", "torch-ddp", "tensorflow"]
ENDED = ("FINISHED", "FAILED", "CANCELLED")


def _start(master, implementation: str, budget: float) -> dict:
    # A test set of 1,000 images (the run's own field): the whole generated one (10,000),
    # evaluated and graded at the end, took 11 of a reference run's 26 s (test_budget.py);
    # the audit samples E2E_AUDIT_SAMPLE of them either way.
    return master.create_run(
        name=implementation, task="resnet20-cifar10", dataset="synthetic",
        implementation=implementation, time_budget=budget, max_epochs=1, test_examples=1000,
    )  # fmt: skip


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_each_implementation_finishes_through_the_api(idle_master, implementation):
    master = idle_master
    run = _start(master, implementation, budget=8)
    done = master.wait_state(run["id"], ENDED, timeout=300)
    assert done["state"] == "FINISHED", (done["reason"], master.log_text(run["id"])[-3000:])
    assert done["implementation"] == implementation
    summary = done["summary"]
    assert summary["implementation"] == implementation
    assert summary["num_workers"] == 2 and summary["images_per_sec"] > 0
    framework = done["manifest"]["framework"]["name"]
    assert framework == ("tensorflow" if implementation == "tensorflow" else "pytorch")
    names = set(master.get(f"/api/metrics/{run['id']}/", params={"metric_type": "run"}).json())
    # The metrics every implementation posts, under the reference's names.
    assert {"train_loss", "val_accuracy", "images_per_sec", "learning_rate"} <= names, names
    assert f"implementation {implementation}" in master.log_text(run["id"])
    # The platform graded every evaluation the run reported, and agrees with it.
    graded = done["evaluation"]
    reported = master.get(
        f"/api/metrics/{run['id']}/", params={"metric_type": "run", "metric_filter": "val_accuracy"}
    ).json()["val_accuracy"]
    assert graded["status"] == "evaluated", graded
    assert graded["grades"] == len(reported) and graded["mismatches"] == [], graded
    assert graded["accuracy_after_time"] == pytest.approx(reported[-1]["value"], abs=1e-6)
    # The final model, exported by the implementation and run by the evaluator on inputs it
    # regenerated, gives the run's last submitted predictions.
    audit = master.wait_audit(run["id"])
    assert audit["status"] == "matches", audit
    assert audit["examples"] == E2E_AUDIT_SAMPLE and audit["sample"] and audit["differ"] == 0, audit
    last = master.get(f"/api/runs/{run['id']}/predictions/").json()[-1]["step"]
    assert (audit["step"], audit["precision"]) == (last, "fp32"), audit  # the worker's word


# The reference's killed rank: test_runs.py and test_faults.py (the same worker code).
@pytest.mark.parametrize("implementation", ["torch-ddp", "tensorflow"])
def test_a_killed_rank_fails_each_implementation_quickly(idle_master, implementation):
    master = idle_master
    run = _start(master, implementation, budget=600)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:  # training: rank 0 has posted a training point
        state = master.run(run["id"])
        assert state["state"] == "STARTED" or state["state"] == "INITIALIZED", state
        points = master.get(
            f"/api/metrics/{run['id']}/",
            params={"metric_type": "run", "metric_filter": "train_loss"},
        ).json()
        if points.get("train_loss") and len(master.ranks(run["id"])) == 2:
            break
        time.sleep(1)
    else:
        pytest.fail(f"run {run['id']} did not start training: {master.log_text(run['id'])[-2000:]}")
    master.ranks(run["id"])[1].kill()
    killed = time.monotonic()
    done = master.wait_state(run["id"], ENDED, timeout=10)
    assert time.monotonic() - killed <= 10.5
    assert done["state"] == "FAILED"
    assert "rank 1 exited with code 137" in done["reason"], done["reason"]
    left = [p for p in master.rank_processes(run["id"]) if p.status() != psutil.STATUS_ZOMBIE]
    assert left == [], f"processes of run {run['id']} still alive: {left}"
