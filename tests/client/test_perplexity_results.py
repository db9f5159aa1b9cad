"""The client shows a goal reached from above (task 3's perplexity) in its own numbers."""

from __future__ import annotations

from mlbench_master.results.statistics import RunResult, summarize
from mlbench_worker.client.cli.results import series_table
from mlbench_worker.client.cli.static_board import score_text


def test_a_series_of_a_perplexity_goal_shows_perplexities_not_percentages():
    target = {"task": "awd-lstm-wikitext2", "goal": "standard", "value": 70.0,
              "metric": "val_perplexity", "direction": "down", "synthetic": True}  # fmt: skip
    split = {"data": 0.01, "compute": 0.05, "communication": 0.0}
    results = [
        RunResult(1, 1, 1, "FINISHED", 20.0, 65.5, 900.0, 0.0, ((10.0, 90.0), (20.0, 65.5)), split),
        RunResult(2, 2, 1, "FINISHED", 22.0, 66.5, 880.0, 0.0, ((11.0, 91.0), (22.0, 66.5)), split),
    ]
    text = series_table({"id": 3, "name": "lm", "statistics": summarize(results, target)})
    assert "val_perplexity 70, lower is better" in text
    assert "66" in text and "6600" not in text and "6,600" not in text


def test_the_board_scores_a_perplexity_after_time_as_a_number():
    entry = {"score": 65.25, "measured": "accuracy_after_time", "lower_is_better": True}
    assert score_text(entry) == "perplexity 65.25 after time (median)"
    assert (
        score_text({**entry, "score": 0.8, "lower_is_better": False})
        == "80.00 % after time (median)"
    )
