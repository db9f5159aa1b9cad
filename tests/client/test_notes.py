"""The notes `mlbench run --wait` prints under the results table."""

from mlbench_worker.client.cli.waiting import result_notes


def test_synthetic_data_and_an_early_stop_are_explained():
    run = {
        "time_budget": 120.0,
        "summary": {
            "dataset": "synthetic",
            "dataset_note": "CIFAR-10 could not be had: no network",
            "stop_reason": "target reached",
        },
    }
    assert result_notes(run) == [
        "",
        "note: generated (synthetic) data, not the task's real data set: "
        "CIFAR-10 could not be had: no network",
        "note: training stopped before its time budget: target reached",
    ]


def test_nothing_to_say_for_real_data_and_a_spent_budget():
    run = {"time_budget": 60, "summary": {"dataset": "cifar10", "stop_reason": "time budget spent"}}
    assert result_notes(run) == []
    assert result_notes({"summary": {"dataset": "synthetic"}}) == []  # asked for synthetic
    assert result_notes({"summary": {}}) == []
