"""Task 3 through the whole stack: HTTP -> RQ job -> mpirun with 2 ranks -> states, metrics,
summary, results, and the final model graded by the master. The models run at their smoke-test size on a small generated stand-in
(the full AWD-LSTM takes about 25 s a step on one busy core of this machine), started as
the run's command with the task named, so the master reads the run as a task-3 run."""

import signal
import time

import psutil
import pytest

from tests.e2e.test_runs import _assert_no_process_left, _rank_pids

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

SMALL = (
    " --dataset synthetic --vocab-size 200 --train-tokens 40000 --test-tokens 4000"
    " --batch-size 8 --threads 1 --log-every 5"
)


@pytest.mark.parametrize(
    ("task", "model"), [("awd-lstm-wikitext2", "awd-lstm-tiny"), ("gpt-wikitext2", "gpt-tiny")]
)
def test_a_language_model_finishes_with_perplexity_metrics_and_summary(idle_master, task, model):
    master = idle_master
    command = f"python -m mlbench_worker {task} --model {model} --max-epochs 2" + SMALL
    run = master.create_run(
        name=task,
        task=task,
        custom_image_command=command,
        run_all_nodes=True,
        time_limit=300,
        test_examples=4000,
    )
    done = master.wait_state(run["id"], ("FINISHED", "FAILED", "CANCELLED"), timeout=240)
    assert done["state"] == "FINISHED", done["reason"]
    assert done["dataset_used"] == "synthetic"
    summary = done["summary"]
    assert (summary["task"], summary["model"], summary["num_workers"]) == (task, model, 2)
    assert summary["tokens_per_sec"] > 0 and "images_per_sec" not in summary
    assert summary["reached"] and summary["final_val_perplexity"] < 200 / 4
    metrics = master.get(f"/api/metrics/{run['id']}/", params={"metric_type": "run"}).json()
    for name in ("train_loss", "val_perplexity", "tokens_per_sec", "comm_bytes", "time_to_target"):
        assert metrics.get(name), f"no {name} stored: {sorted(metrics)}"
    # The run's result is its perplexity: what the statistics and the board read.
    result = master.get(f"/api/runs/{run['id']}/").json()
    assert result["summary"]["best_val_perplexity"] <= summary["final_val_perplexity"]
    # The worker posted its final model after its summary; the master grades its perplexity
    # over the stream it regenerates and finds the run's own last one (perplexity_audit.py).
    end = time.monotonic() + 120
    while (audit := master.run(run["id"])["evaluation"]["audit"])["status"] == "pending":
        assert time.monotonic() < end, audit
        time.sleep(0.5)
    assert audit["status"] == "matches" and audit["kind"] == "perplexity", audit
    assert audit["graded"]["whole"] and audit["dataset"] == "synthetic"
    assert audit["reported_perplexity"] == pytest.approx(summary["final_val_perplexity"])
    assert audit["difference"] <= audit["tolerance"] == 1e-5
    _assert_no_process_left(master, run["id"])


def test_a_killed_rank_fails_a_language_model_run_within_10_s(idle_master):
    master = idle_master
    command = (
        "python -m mlbench_worker awd-lstm-wikitext2 --model awd-lstm-tiny"
        + SMALL
        + (" --max-epochs 1000 --target standard")
    )
    run = master.create_run(
        name="killed", task="awd-lstm-wikitext2", custom_image_command=command,
        run_all_nodes=True, time_limit=300, test_examples=4000,
    )  # fmt: skip
    pids = _rank_pids(master, run["id"])
    time.sleep(3)  # into training (the tiny run reaches its first steps within seconds)
    psutil.Process(pids[1]).send_signal(signal.SIGKILL)
    done = master.wait_state(run["id"], ("FINISHED", "FAILED", "CANCELLED"), timeout=10)
    assert done["state"] == "FAILED"
    assert "rank 1 exited with code 137 (killed: out of memory?)" in done["reason"]
    _assert_no_process_left(master, run["id"])
