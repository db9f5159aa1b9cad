"""`mlbench show`'s time to target: past the run's time budget it says the target was
reached by the evaluation once training stopped and that the clock includes it (issue 50),
as the accuracy-after-time note of `mlbench run --wait` does."""

import argparse

from mlbench_worker.client.cli.accuracy import target_line
from mlbench_worker.client.cli.commands import cmd_show


def _run(ttt: float | None, budget: float = 30.0) -> dict:
    summary = {"config": {"time_budget": budget}}
    if ttt is not None:
        summary["time_to_target"] = ttt
    return {"id": 3, "name": "r", "state": "FINISHED", "summary": summary}


def test_a_time_past_the_budget_says_the_clock_includes_the_evaluation():
    line = target_line(_run(41.0))
    assert line.startswith("41s (past its 30s time budget")
    assert "the clock includes that evaluation" in line


def test_a_time_within_the_budget_is_just_the_time():
    assert target_line(_run(12.0)) == "12s"
    assert target_line(_run(None)) == ""


class _Master:
    url = "http://master"

    def __init__(self, run: dict) -> None:
        self.run = run

    def json(self, what: str, *args: object) -> dict:
        assert what == "get_run"
        return self.run


def test_show_prints_the_line(capsys):
    args = argparse.Namespace(run=3, json=False, wide=True)
    assert cmd_show(args, _Master(_run(41.0))) == 0
    out = capsys.readouterr().out
    [line] = [x for x in out.splitlines() if x.startswith("time to target")]
    assert "the clock includes that evaluation" in line
