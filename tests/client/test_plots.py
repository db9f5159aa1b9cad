"""The charts decode as PNG and SVG, and the points they drew are the report's."""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET

import pytest
from PIL import Image

from mlbench_master.results.statistics import RunResult, summarize
from mlbench_worker.shared import plots

TARGET = {"task": "logreg-epsilon", "goal": "light", "value": 0.8, "synthetic": True}
SVG = "{http://www.w3.org/2000/svg}"


def described(image: bytes, fmt: str) -> dict:
    """The JSON a chart carries about what it drew, read from the decoded file."""
    if fmt == "png":
        decoded = Image.open(io.BytesIO(image))
        decoded.load()
        assert decoded.format == "PNG" and decoded.size[0] > 400
        return json.loads(decoded.text["Description"])
    root = ET.fromstring(image)
    assert root.tag == f"{SVG}svg"
    node = root.find(".//{http://purl.org/dc/elements/1.1/}description")
    return json.loads(node.text)


def stats() -> dict:
    results = [
        RunResult(1, 1, 1, "FINISHED", 20.0, 0.82, 900.0, 0.0, ((10.0, 0.6), (20.0, 0.82)),
                  {"data": 0.01, "compute": 0.05, "communication": 0.0}),
        RunResult(2, 2, 1, "FINISHED", 24.0, 0.81, 950.0, 0.0, ((12.0, 0.7), (24.0, 0.81)),
                  {"data": 0.01, "compute": 0.05, "communication": 0.0}),
        RunResult(3, 1, 2, "FINISHED", 11.0, 0.85, 1700.0, 0.2, ((6.0, 0.7), (11.0, 0.85)),
                  {"data": 0.01, "compute": 0.03, "communication": 0.01}),
        RunResult(4, 2, 2, "FINISHED", 13.0, 0.80, 1650.0, 0.2, ((7.0, 0.75), (13.0, 0.8)),
                  {"data": 0.01, "compute": 0.03, "communication": 0.012}),
    ]  # fmt: skip
    return summarize(results, TARGET)


@pytest.mark.parametrize("fmt", plots.FORMATS)
def test_accuracy_chart_draws_every_curve_and_band(fmt):
    data = stats()
    drawn = described(plots.render("accuracy", data, fmt, title="series 7"), fmt)
    assert drawn["chart"] == "accuracy"
    for curve in data["curves"]:
        label = f"run {curve['run']} (seed {curve['seed']}, {curve['num_workers']} worker"
        (points,) = [v for k, v in drawn["lines"].items() if k.startswith(label)]
        assert points == curve["points"]
    for band in data["bands"]:
        k = band["num_workers"]
        medians = drawn["lines"][f"{k} worker{'s' * (k != 1)}: median"]
        assert medians == [[p[0], p[2]] for p in band["points"]]


@pytest.mark.parametrize("fmt", plots.FORMATS)
def test_speedup_chart_draws_the_medians(fmt):
    data = stats()
    drawn = described(plots.render("speedup", data, fmt), fmt)
    for key in ("speedup", "efficiency"):
        assert drawn["lines"][key] == [[g["num_workers"], g[key]["median"]] for g in data["groups"]]


def test_time_split_bars_and_synthetic_badge():
    data = stats()
    image = plots.render("time-split", data, "svg")
    drawn = described(image, "svg")
    assert drawn["runs"] == [c["run"] for c in data["curves"]]
    assert drawn["bars"]["communication"] == [
        pytest.approx(1000 * c["time_split"]["communication"]) for c in data["curves"]
    ]
    root = ET.fromstring(image)
    assert root.find(f".//{SVG}g[@id='synthetic-badge']") is not None
    real = plots.render("time-split", {**data, "target": {**TARGET, "synthetic": False}}, "svg")
    assert ET.fromstring(real).find(f".//{SVG}g[@id='synthetic-badge']") is None


def test_bad_chart_format_and_missing_data_say_what_is_wrong():
    with pytest.raises(plots.PlotError, match="chart 'pie' is not one of accuracy"):
        plots.render("pie", stats(), "png")
    with pytest.raises(plots.PlotError, match="format 'jpg' is not one of png, svg"):
        plots.render("accuracy", stats(), "jpg")
    lonely = summarize([RunResult(1, 1, 2, "FINISHED", 5.0)], TARGET)
    with pytest.raises(plots.PlotError, match="no speed-up to draw"):
        plots.render("speedup", lonely, "png")


def test_a_perplexity_goal_is_drawn_in_its_own_numbers_from_above():
    target = {"task": "gpt-wikitext2", "goal": "light", "value": 250.0, "metric": "val_perplexity",
              "direction": "down", "synthetic": True}  # fmt: skip
    results = [
        RunResult(1, 1, 1, "FINISHED", 20.0, 120.0, 900.0, 0.0, ((10.0, 900.0), (20.0, 120.0)),
                  {"data": 0.01, "compute": 0.05, "communication": 0.0}),
    ]  # fmt: skip
    image = plots.render("accuracy", summarize(results, target), "svg")
    drawn = described(image, "svg")
    assert drawn["lines"]["run 1 (seed 1, 1 worker)"] == [[10.0, 900.0], [20.0, 120.0]]
    text = image.decode()
    assert "target 250" in text and "val perplexity (lower is better)" in text
    assert "25000" not in text  # not drawn as a percentage
