"""`make bench`'s one table of every ratio (tests/benchmarks/common.py): each bench's ratios
against their goals, gathered from the result files into RATIOS.md, ratios.rst and the
marked block of a results page, whose other lines stay as they were."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest


@pytest.fixture
def common(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("MLBENCH_BENCH_DIR", str(tmp_path / "results"))
    import tests.benchmarks.common as module

    return importlib.reload(module)


def test_a_goal_is_met_or_not_by_its_own_words(common) -> None:
    assert common.ratio("loop", 0.98, ">= 0.97")["met"] is True
    assert common.ratio("loop", 0.96, ">= 0.97")["met"] is False
    assert common.ratio("board", 240.0, "<= 300 ms")["met"] is True
    assert common.ratio("board", 301.0, "<= 300 ms")["met"] is False
    missing = common.ratio("vs MLflow", None, ">= 5", note="mlflow not installed")
    assert missing["met"] is None and missing["note"] == "mlflow not installed"


def test_every_ratio_in_one_table_and_copied_into_the_docs_block(common, tmp_path) -> None:
    folder = tmp_path / "results"
    common.write_results("worker", "Loop", ["a"], [["x"]], {},
                         ratios=[common.ratio("ours / plain loop", 0.981, ">= 0.97")])  # fmt: skip
    common.write_results("api", "API", ["a"], [["y"]], {}, ratios=[
        common.ratio("points/s vs MLflow", 3.4, ">= 5"),
        common.ratio("vs COPY", None, ">= 0.5", note="no COPY run"),
    ])  # fmt: skip
    common.write_results("plain", "No ratios", ["a"], [["z"]], {})
    docs = tmp_path / "results.rst"
    docs.write_text(
        "Title\n=====\n\nBefore.\n\n.. ratios-begin\n\nold table\n\n.. ratios-end\n\nAfter.\n"
    )

    common.collect(folder, docs)

    md = (folder / "RATIOS.md").read_text()
    assert md.index("points/s vs MLflow") < md.index("ours / plain loop")  # files' order
    assert "| api | points/s vs MLflow | 3.4 | >= 5 | NO |" in md
    assert "| api | vs COPY | - | >= 0.5 | not measured |" in md
    assert "| worker | ours / plain loop | 0.981 | >= 0.97 | yes |" in md
    assert "No ratios" not in md
    text = docs.read_text()
    assert "old table" not in text and text.startswith("Title\n=====\n\nBefore.\n")
    assert text.endswith(".. ratios-end\n\nAfter.\n")
    assert "     - ours / plain loop" in text and "Machine:" in text
    saved = json.loads((folder / "api.json").read_text())
    assert len(saved["load_average"]) == 3 and saved["ratios"][1]["value"] is None


def test_a_page_without_the_markers_is_left_alone(common, tmp_path) -> None:
    common.write_results("worker", "Loop", ["a"], [["x"]], {},
                         ratios=[common.ratio("loop", 1.0, ">= 0.97")])  # fmt: skip
    docs = tmp_path / "results.rst"
    docs.write_text("Only text.\n")
    common.collect(tmp_path / "results", docs)
    assert docs.read_text() == "Only text.\n"
    assert (tmp_path / "results" / "ratios.rst").read_text().startswith(".. list-table::")
