"""The summary record (mlbench_worker/shared/result.py): what docs/metrics.rst says of it is
the declaration itself, both implementations' summaries fit it, and its checks can fail.

The tables of docs/metrics.rst's "The summary record" are the declaration, rendered by
`rendered` below: a field added, removed or re-typed in result.py fails here until the page
is updated (the failure prints the table to paste).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mlbench_worker.shared import result
from tests.summaries import summary_body

DOC = Path(__file__).resolve().parent.parent / "docs" / "metrics.rst"


def rendered(fields: tuple[result.Field, ...], title: str) -> str:
    """One list-table of `fields`: name, type, unit, meaning."""
    rows = [
        f".. list-table:: {title}",
        "   :header-rows: 1",
        "   :widths: 24 12 12 52",
        "",
        "   * - field",
        "     - type",
        "     - unit",
        "     - meaning",
    ]
    for f in fields:
        kind = f.type + (" or null" if f.nullable else "")
        meaning = f.meaning + ("" if f.required else " (only where it applies)")
        rows += [f"   * - ``{f.name}``", f"     - {kind}", f"     - {f.unit or '-'}"]
        rows += [f"     - {meaning}"]
    return "\n".join(rows) + "\n"


@pytest.mark.parametrize(
    ("fields", "title"),
    [
        (result.TRAINING_FIELDS, "A training run's summary"),
        (result.CONFIG_FIELDS, "The entries every training run's config holds"),
        (result.MEASUREMENT_FIELDS, "A measurement run's summary (the backend benchmark)"),
    ],
)
def test_the_docs_show_the_declared_record(fields, title):
    table = rendered(fields, title)
    assert table in DOC.read_text(), f"docs/metrics.rst should hold this table:\n\n{table}"


def test_the_test_summary_fits_and_each_problem_is_named():
    assert result.problems(summary_body()) == {}
    body = summary_body()
    del body["seed"]
    body["reached"] = 1
    body["config"]["threads"] = None
    assert result.problems(body) == {
        "seed": "seed is missing (an integer)",
        "reached": "reached must be a boolean, got 1",
        "config.threads": "config.threads must be an integer, got None",
    }
    assert result.problems(["a list"]) == {"": "the summary must be a JSON object"}


def test_reading_a_field_the_record_does_not_declare_is_an_error():
    body = summary_body()
    assert result.read(body, "time_to_target") == 42.5
    assert result.read(body, "images_per_sec") == 812.0  # a task's throughput field
    assert result.read(None, "comm_share") is None and result.read_config(body, "threads") == 1
    with pytest.raises(KeyError, match="'accuracy' is not a field"):
        result.read(body, "accuracy")


def test_the_builder_refuses_a_record_that_does_not_fit():
    with pytest.raises(ValueError, match="seed must be an integer, got '7'"):
        result.training_summary(
            task="resnet20-cifar10",
            outcome={},
            throughput=None,
            comm_bytes_per_step=0.0,
            full_allreduce_bytes=0,
            config={},
            seed="7",
        )
