"""The command line around bundles, against a live master: an exported-then-imported run and
series say the same cost in `mlbench show` and `mlbench report` as at their origin; `mlbench
export` of a series still running says to wait or cancel it, never to delete it; `mlbench
import` of runs exported again names the file imported and the master that signed it, and
the origin's bundle it carries. One live server plays each installation in turn (its own
MLBENCH_HOME, so its own key), the origin's rows removed before the next imports them."""

from __future__ import annotations

import hashlib
import json

import pytest

from mlbench_master.api.models import ImportedBundle, Run, Series
from mlbench_master.bundles import signing
from mlbench_master.cluster import node_kinds
from tests.bundles.test_imported_cost import EVALS, NODES, TASK, _prices

pytestmark = pytest.mark.django_db(transaction=True)


def _use(settings, tmp_path, name: str) -> str:
    """Make the live server installation `name`; its fingerprint."""
    home = tmp_path / name
    home.mkdir(exist_ok=True)
    settings.MLBENCH_HOME = home
    return signing.this_installation().fingerprint


def _said(cli, capsys, *argv: str) -> str:
    assert cli(*argv) == 0
    return capsys.readouterr().out


def _costs(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if "cost" in line or "priced" in line]


def _report_costs(text: str) -> list:
    return [r["cost"] for r in json.loads(text)["runs"]]


def test_an_imported_run_and_series_say_the_same_cost(stored_cli, settings, tmp_path, capsys):
    cli, maker = stored_cli, stored_cli.maker
    _use(settings, tmp_path, "origin")
    _prices(cli.api)
    run = maker.run(None, 1, 3, EVALS, task=TASK, nodes=NODES, seconds=123.0)
    series = maker.series(task=TASK, seeds=[1, 2], worker_counts=[2])
    members = [
        maker.run(
            series, s, 2, EVALS, task=TASK, nodes=node_kinds.local_nodes(2), seconds=50.0 + s
        )  # fmt: skip
        for s in (1, 2)
    ]
    show = _costs(_said(cli, capsys, "show", str(run.pk)))
    assert any("USD" in line for line in show), show
    report = _report_costs(_said(cli, capsys, "report", str(run.pk), "--json"))
    stats = json.loads(_said(cli, capsys, "report", "--series", str(series.pk), "--json"))
    assert stats["cost"]["not_priced"] == []
    assert _said(cli, capsys, "export", str(run.pk), "-o", "run.zip")
    assert _said(cli, capsys, "export", "--series", str(series.pk), "-o", "series.zip")
    Series.objects.filter(pk=series.pk).delete()
    Run.objects.filter(pk__in=[run.pk, *(m.pk for m in members)]).delete()

    _use(settings, tmp_path, "here")
    out = _said(cli, capsys, "import", "run.zip")
    copy = int(out.split("  run ")[1].split(":")[0])
    out = _said(cli, capsys, "import", "series.zip")
    series_here = int(out.split("  series ")[1].split(":")[0])
    assert _costs(_said(cli, capsys, "show", str(copy))) == show
    assert _report_costs(_said(cli, capsys, "report", str(copy), "--json")) == report
    again = json.loads(_said(cli, capsys, "report", "--series", str(series_here), "--json"))
    assert again["cost"] == stats["cost"]


def test_export_of_a_running_series_says_to_wait_or_cancel_it(stored_cli, capsys):
    series = stored_cli.maker.series(task=TASK, seeds=[1, 2], worker_counts=[1])
    stored_cli.maker.run(series, 1, 1, EVALS, task=TASK)
    stored_cli.maker.run(series, 2, 1, EVALS, task=TASK, state=Run.STARTED)
    assert stored_cli("export", "--series", str(series.pk)) == 6  # EXIT_CONFLICT
    err = capsys.readouterr().err
    assert "is STARTED" in err and f"mlbench series {series.pk} --cancel" in err, err
    assert "delete" not in err, err
    assert series.runs.filter(state=Run.STARTED).exists()  # nothing was stopped or deleted


def test_import_of_runs_exported_again_names_both_files(stored_cli, settings, tmp_path, capsys):
    cli = stored_cli
    origin = _use(settings, tmp_path, "origin")
    run = cli.maker.run(None, 1, 1, EVALS, task=TASK)
    _said(cli, capsys, "export", str(run.pk), "-o", "first.zip")
    Run.objects.filter(pk=run.pk).delete()
    middle = _use(settings, tmp_path, "middle")
    out = _said(cli, capsys, "import", "first.zip")
    copy = int(out.split("  run ")[1].split(":")[0])
    _said(cli, capsys, "export", str(copy), "-o", "again.zip")
    Run.objects.filter(pk=copy).delete()
    ImportedBundle.objects.all().delete()

    _use(settings, tmp_path, "third")
    out = _said(cli, capsys, "import", "again.zip").splitlines()[0]
    outer = hashlib.sha256((tmp_path / "again.zip").read_bytes()).hexdigest()
    inner = hashlib.sha256((tmp_path / "first.zip").read_bytes()).hexdigest()
    assert f"SHA-256 {outer[:16]}…, signed by installation {middle}" in out, out
    assert f"installation {origin} signed (SHA-256 {inner[:16]}…)" in out, out
