"""How the CLI says what a rank sent (issue 44): `mlbench show`'s `sent` line and the
report's SENT TO TARGET cell, from the trainer's counts in the summary."""

from __future__ import annotations

from mlbench_worker.client.cli.comparison import sent_line, volume_to_target


def test_bytes_per_step_and_to_the_target_in_decimal_units():
    summary = {"comm_bytes_per_step": 16000.0, "compression_ratio": 4.0,
               "comm_bytes_to_target": 2_560_000.0}  # fmt: skip
    assert sent_line(summary) == "16.0 kB a step (4.0x), 2.6 MB to the target"
    assert volume_to_target(summary) == "2.6 MB"


def test_a_missed_target_is_said_and_a_summary_from_before_the_count_is_not_guessed():
    missed = {"comm_bytes_per_step": 8004.0, "compression_ratio": 1.0,
              "comm_bytes_to_target": None}  # fmt: skip
    assert sent_line(missed) == "8.0 kB a step (1.0x), target not reached"
    assert volume_to_target(missed) == "not reached"
    older = {"comm_bytes_per_step": 8004.0, "compression_ratio": None}
    assert sent_line(older) == "8.0 kB a step" and volume_to_target(older) == "-"
    assert sent_line({}) == ""  # the worker has not said yet
