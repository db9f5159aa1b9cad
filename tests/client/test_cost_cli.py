"""`mlbench show`, `mlbench report` and `mlbench report --series` print the master's costs,
and "not priced" with its reason where there is none (a live server on stored rows)."""

from __future__ import annotations

import pytest

from mlbench_master.cluster import node_kinds

pytestmark = pytest.mark.django_db(transaction=True)

EVALS = [(10.0, 0.6, 1), (20.0, 0.85, 2)]  # the light target (0.8) reached at 20 s
EMPTY = "not priced: the price table was empty when the run was created"


@pytest.fixture
def cli(stored_cli):
    return stored_cli


def _price(cli, kind: str, per_hour: float) -> None:
    body = {"node_kind": kind, "price_per_hour": per_hour, "currency": "USD",
            "source": "our own list", "as_of": "2026-11-01"}  # fmt: skip
    assert cli.api.post("/api/prices/", body, format="json").status_code == 201


def test_show_and_report_print_the_cost_or_not_priced(cli, capsys):
    unpriced = cli.maker.run(None, 1, 1, EVALS, nodes=node_kinds.local_nodes(1), seconds=90)
    _price(cli, "local", 2.0)
    priced = cli.maker.run(None, 2, 2, EVALS, nodes=node_kinds.local_nodes(2), seconds=90)
    assert cli("show", str(priced.pk)) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("cost "))
    # 20 s and 90 s of one machine at 2 USD an hour, whatever the workers on it.
    assert "to target 0.0111 USD (20s); whole run 0.05 USD (1m30s); at 2.00 USD/h" in line
    assert line.rstrip().endswith("as local 2.00 USD/h")
    assert cli("show", str(unpriced.pk)) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("cost "))
    assert line.split(None, 1)[1] == EMPTY
    assert cli("report", str(priced.pk), str(unpriced.pk)) == 0  # the cost to target
    out = capsys.readouterr().out
    rows = {int(r.split()[0]): r for r in out.splitlines() if r[:1].isdigit()}
    assert rows[priced.pk].rstrip().endswith("  0.0111 USD")
    assert rows[unpriced.pk].rstrip().endswith("not priced")
    assert f"cost of run {unpriced.pk}: {EMPTY}" in out
    assert cli("report", str(priced.pk), str(unpriced.pk), "--wide") == 0  # and of the run
    out = capsys.readouterr().out
    rows = {int(r.split()[0]): r for r in out.splitlines() if r[:1].isdigit()}
    assert rows[priced.pk].rstrip().endswith("0.0111 / 0.05 USD")
    assert rows[unpriced.pk].rstrip().endswith("not priced")
    assert f"cost of run {unpriced.pk}: {EMPTY}" in out


def test_report_series_prints_cost_and_price_index(cli, capsys):
    _price(cli, "local", 1.0)
    series = cli.maker.series(seeds=[1], worker_counts=[1, 2])
    cli.maker.run(series, 1, 1, [(10.0, 0.5, 1), (40.0, 0.85, 2)], nodes=node_kinds.local_nodes(1))
    cli.maker.run(series, 1, 2, [(10.0, 0.5, 1), (25.0, 0.85, 2)], nodes=node_kinds.local_nodes(2))
    assert cli("report", "--series", str(series.pk)) == 0
    out = capsys.readouterr().out
    stats = cli.api.get(f"/api/series/{series.pk}/").json()["statistics"]
    two = stats["groups"][1]
    # One machine for both counts: the same price, 40/25 the speed, 25/40 the money.
    assert two["price_index"] == pytest.approx(25 / 40)
    row = next(x for x in out.splitlines() if x.startswith("2 "))
    assert "0.00694 USD" in row and f"{two['price_index']:.2f}" in row
    legend = " ".join(out.split())  # wrapped to the terminal's width
    assert "price index: the price per hour over the 1-worker runs'" in legend
