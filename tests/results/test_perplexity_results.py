"""A task whose goal is reached from above (task 3's validation perplexity) through the
results: its time to target, perplexity after time, board rank and MLPerf log."""

from __future__ import annotations

import pytest

from mlbench_master.results import board, mllog
from mlbench_master.results.statistics import for_series
from tests.mllog_check import check, events

pytestmark = pytest.mark.django_db

TASK = "awd-lstm-wikitext2"


def _run(maker, series, seed, evals, **kw):
    return maker.run(series, seed, 2, evals, task=TASK, target="standard", target_value=70.0,
                     config={"batch_size": 80, "peak_lr": 30.0, "train_tokens": 2088628,
                             "valid_tokens": 217646}, **kw)  # fmt: skip


def test_perplexity_falling_to_the_goal_is_the_time_to_target_and_the_log_passes(maker, tmp_path):
    series = maker.series(task=TASK, target="standard")
    run = _run(maker, series, 1, [(10.0, 400.0, 1), (20.0, 69.5, 2), (30.0, 66.0, 3)])
    stats = for_series(series)
    (curve,) = stats["curves"]
    assert curve["time_to_target"] == 20.0
    assert stats["groups"][0]["accuracy_after_time"]["median"] == 66.0  # the final perplexity
    assert stats["target"]["direction"] == "down" and stats["target"]["metric"] == "val_perplexity"
    text = mllog.run_log(run)
    lines = events(text)
    assert [e["value"] for e in lines if e["key"] == "eval_accuracy"] == [400.0, 69.5]
    assert [e["value"] for e in lines if e["key"] == mllog.DIRECTION_KEY] == ["down"]
    ok = check(TASK, text, tmp_path)
    assert ok.returncode == 0, ok.stderr


def test_a_perplexity_never_low_enough_fails_the_checker(maker, tmp_path):
    run = _run(
        maker, maker.series(task=TASK, target="standard"), 1, [(10.0, 400.0, 1), (20.0, 90.0, 2)]
    )
    text = mllog.run_log(run)
    assert check(TASK, text, tmp_path).returncode == 1


def test_the_board_ranks_lower_perplexity_after_time_first(maker):
    for seed, final in ((1, 80.0), (2, 75.0)):
        series = maker.series(task=TASK, target="standard", time_budget=60, seeds=[seed],
                              worker_counts=[2], name=f"s{seed}")  # fmt: skip
        run = _run(maker, series, seed, [(10.0, 400.0, 1), (60.0, final, 2)])
        run.time_budget = 60
        run.save(update_fields=["time_budget"])
    answer = board.board(board.Filters(task=TASK))
    entries = [e for section in answer["sections"] for e in section["entries"]]
    ranked = [(e["rank"], e["score"]) for e in entries if e["rank"] is not None]
    assert ranked == [(1, 75.0), (2, 80.0)], entries
