"""The pieces every table command is made of (formatting.py): the plural helper, tables that
fit a width, wrapped prose, the terminal's width, and a 404 said as what was asked for
(master.py). No master: pure functions."""

from __future__ import annotations

import pytest

from mlbench_worker.client.cli.formatting import (
    DEFAULT_WIDTH,
    Column,
    View,
    fit,
    plural,
    terminal_width,
    wrap,
)
from mlbench_worker.client.cli.master import not_found


def test_plural_is_singular_for_exactly_one():
    assert plural(1, "worker") == "1 worker"
    assert plural(2, "worker") == "2 workers"
    assert plural(0, "evaluation") == "0 evaluations"
    assert plural(1.0, "core") == "1 core"
    assert plural(1.5, "core") == "1.5 cores"
    assert plural(1, "entry", "entries") == "1 entry"
    assert plural(3, "entry", "entries") == "3 entries"
    assert plural(1, "series", "series") == "1 series"


ROWS = [
    {"id": 1, "name": "a name far longer than any terminal column should show", "rate": "61234 images/s",
     "extra": "x" * 30, "note": "short"},
    {"id": 22, "name": "b", "rate": "12 images/s", "extra": "y", "note": ""},
]  # fmt: skip
COLUMNS = [
    Column("ID", lambda r: r["id"]),
    Column("NAME", lambda r: r["name"], most=30, least=8),
    Column("RATE", lambda r: r["rate"]),
    Column("EXTRA", lambda r: r["extra"], drop=1),
    Column("WIDE ONLY", lambda r: "hidden", wide=True),
    Column("NOTE", lambda r: r["note"], brief=lambda r: r["note"][:2], brief_header="N"),
]


def lines(text: str) -> list[str]:
    return text.splitlines()


def test_fit_shortens_names_then_leaves_out_columns_and_never_cuts_numbers():
    roomy = fit(COLUMNS, ROWS, View(200))
    assert lines(roomy)[0].split() == ["ID", "NAME", "RATE", "EXTRA", "N"]  # no WIDE ONLY
    assert "a name far longer than any te…" in roomy  # `most`: 30
    assert "sh" in lines(roomy)[2] and "short" not in roomy  # the brief cell
    tight = fit(COLUMNS, ROWS, View(70))
    assert max(len(line) for line in lines(tight)) <= 70
    assert "EXTRA" in lines(tight)[0] and "left out" not in tight
    narrow = fit(COLUMNS, ROWS, View(40))
    assert max(len(line) for line in lines(narrow)) <= 40
    assert "EXTRA" not in lines(narrow)[0]
    assert "61234 images/s" in narrow  # a number keeps its unit
    assert "a name far long…  61234" in narrow  # shortened to what is left after EXTRA went
    assert "(to fit 40 columns, left out: EXTRA; --wide shows all)" in narrow.replace("\n  ", " ")


def test_the_wide_view_has_every_column_whole():
    text = fit(COLUMNS, ROWS, View(40, wide=True))
    assert lines(text)[0].split() == ["ID", "NAME", "RATE", "EXTRA", "WIDE", "ONLY", "NOTE"]
    assert ROWS[0]["name"] in text and "short" in text and "…" not in text


def test_wrap_breaks_prose_at_spaces_with_an_indent():
    text = "warning: " + " ".join(["word"] * 40)
    wrapped = wrap(text, 50)
    assert all(len(line) <= 50 for line in wrapped.splitlines())
    assert all(line.startswith("  ") for line in wrapped.splitlines()[1:])
    assert " ".join(wrapped.split()) == text
    url = "http://127.0.0.1:8000/" + "x" * 80
    assert url in wrap(f"see {url} now", 40)  # never broken inside a word
    assert View(50, wide=True).say(text) == text
    assert View(50, prose=False).say(text) == text  # no terminal: one line, for grep


def test_the_width_is_columns_else_the_terminal_else_120(monkeypatch):
    monkeypatch.setenv("COLUMNS", "77")
    assert terminal_width() == 77
    monkeypatch.setenv("COLUMNS", "not a number")
    assert terminal_width() == DEFAULT_WIDTH == 120  # pytest's captured output is no terminal
    monkeypatch.delenv("COLUMNS")
    assert terminal_width() == 120


@pytest.mark.parametrize(
    ("url", "detail", "said"),
    [
        ("http://m/api/runs/99/", "No Run matches the given query.",
         "run 99 does not exist (`mlbench runs` lists them)"),
        ("http://m/api/runs/99/logs/?offset=0", "Not found.",
         "run 99 does not exist (`mlbench runs` lists them)"),
        ("http://m/api/series/9/cancel/", "No Series matches the given query.",
         "series 9 does not exist (`mlbench series` lists them)"),
        ("http://m/api/series/9/mllog/", "series 9 does not exist",
         "series 9 does not exist (`mlbench series` lists them)"),
        ("http://m/api/runs/bundle/?runs=1,98", "run 98 does not exist",
         "run 98 does not exist (`mlbench runs` lists them)"),
        ("http://m/api/runs/5/predictions/10/", "no predictions of step 10",
         "not found: no predictions of step 10; `mlbench runs` lists the runs"),
    ],
)  # fmt: skip
def test_a_404_names_what_was_asked_for_and_where_to_look(url, detail, said):
    assert not_found(url, detail) == said
