"""The record a training run publishes, built by one function (training/run_record.py) from
the run's configuration and what it measured, equals what each implementation built by hand
before: run_records_before.json holds the summaries that fixed-seed runs of the reference
loop (task 1a on 2 ranks, with PowerSGD's options, task 2, task 3a), torch-ddp, TensorFlow
and Spark wrote before the rank body existed, with their command lines. Each is rebuilt here
from its command line (parsed into the RunConfig every rank reads) and the values only the
run could know, taken from the old record, and must come out equal, key for key and in the
same order (Spark's config aside: its entries now follow the one order of every record,
the common four first, then the task's and the implementation's own, then the threads).

Also: the shares of communication (`comm_shares`) as each implementation computed them.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from mlbench_worker.shared import catalogue
from mlbench_worker.training.options import parse_args
from mlbench_worker.training.progress import Progress
from mlbench_worker.training.run_record import RunFacts, comm_shares, run_record

BEFORE = json.loads((Path(__file__).parent / "run_records_before.json").read_text())
COMMON_CONFIG = ("batch_size", "peak_lr", "max_epochs", "time_budget", "threads")
ADDED_SINCE = "comm_bytes_to_target"
TASK_RESULTS = ("final_val_top5_accuracy", "final_val_perplexity", "best_val_perplexity")


def rebuilt(argv: list[str], old: dict) -> dict:
    """The record run_record builds for `argv` with the measured values of `old`."""
    config = parse_args(argv)
    throughput = catalogue.get(config.task).throughput_metric
    facts = RunFacts(
        dataset=old["dataset"],
        dataset_note=old["dataset_note"],
        num_workers=old["num_workers"],
        backend=old["backend"],
        device=old["device"],
        threads=old["config"]["threads"],
        peak_lr=old["config"]["peak_lr"],
        comm_share=old["comm_share"],
        comm_share_total=old["comm_share_total"],
        comm_bytes_per_step=old["comm_bytes_per_step"],
        comm_bytes_to_target=old.get("comm_bytes_to_target"),
        full_allreduce_bytes=(
            round(old["compression_ratio"] * old["comm_bytes_per_step"])
            if old["compression_ratio"] is not None
            else 0
        ),
        versions=old["versions"],
        hardware=old["hardware"],
        config={k: v for k, v in old["config"].items() if k not in COMMON_CONFIG},
        results={k: old[k] for k in TASK_RESULTS if k in old},
        implementation_note=old.get("implementation_note"),
    )
    progress = Progress(
        epochs_done=old["epochs"],
        val_accuracy=old["final_val_accuracy"],
        best_val_accuracy=old["best_val_accuracy"],
        time_to_target=old["time_to_target"],
        stop_reason=old["stop_reason"],
    )
    return run_record(
        config,
        facts,
        progress,
        target_accuracy=old["target_accuracy"],
        throughput=old[throughput] if old[throughput] is not None else float("nan"),
        elapsed=old["elapsed"],
    )


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_the_record_from_the_configuration_equals_the_one_built_by_hand_before(name):
    argv, old = BEFORE[name]["argv"], BEFORE[name]["summary"]
    new = rebuilt(argv, old)
    # Declared after these records were written (issue 44): present, null, and nothing else new.
    assert new.pop(ADDED_SINCE) is None
    assert new == old
    assert list(new) == list(old)  # the declared order
    if old["implementation"] != "spark":
        assert list(new["config"]) == list(old["config"])
    else:  # the one order of every record: the common four, Spark's own, the threads
        assert list(new["config"])[:4] == list(COMMON_CONFIG[:4])
        assert list(new["config"])[-1] == "threads"


def test_the_configuration_decides_what_it_holds():
    """What the run was asked for comes from the RunConfig, never from the measured facts."""
    argv, old = BEFORE["ref2mpi_powersgd"]["argv"], BEFORE["ref2mpi_powersgd"]["summary"]
    record = rebuilt([*argv, "--seed", "12", "--time-budget", "9"], old)
    assert record["seed"] == 12 and record["config"]["time_budget"] == 9.0
    assert record["algorithm"] == "powersgd"
    assert record["algorithm_options"] == parse_args(argv).algorithm_options


def test_comm_shares_are_the_implementations_sums():
    rng = np.random.default_rng(3)
    for _ in range(200):
        totals = rng.uniform(0, 10, 4)
        step_total = float(totals[:3].sum())  # the reference's (and TensorFlow's) sum
        share, share_total = comm_shares(*totals)
        assert share == float(totals[2] / step_total)
        assert share_total == float(totals[3] / step_total)
        assert comm_shares(*totals[:3]) == (share, share)  # nothing overlapped
        compute, comm = float(totals[1]), float(totals[2])  # Spark's: no data time
        assert comm_shares(0.0, compute, comm)[0] == comm / (compute + comm)
    assert comm_shares(0.0, 0.0, 0.0, 0.0) == (0.0, 0.0)
