"""`mlbench board --html DIR` against a live master (this test's web server on real
PostgreSQL, holding the board's stored runs, one of them imported): the static board has
the API's rows in the API's order, links by relative paths, and reads without a token only
where the master allows anonymous reads."""

from __future__ import annotations

import json
import re

import pytest
import requests

from mlbench_master.accounts.users import issue_user_token
from mlbench_worker.client.cli import main
from tests.board.stored import TASK, prepared

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def live(live_server, settings, monkeypatch, tmp_path):
    prepared(settings, tmp_path)
    monkeypatch.delenv("MLBENCH_TOKEN", raising=False)
    monkeypatch.setenv("MLBENCH_HOME", str(tmp_path / "client-home"))
    token = issue_user_token("reader", create_user=True)
    return {"url": live_server.url, "token": token}


def _api(live: dict, **query) -> dict:
    headers = {"Authorization": f"Token {live['token']}"}
    answer = requests.get(live["url"] + "/api/results/", query, headers=headers, timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_the_static_board_has_the_api_rows(live, tmp_path, capsys):
    folder = tmp_path / "site"
    cli = ["--url", live["url"], "--token", live["token"], "board", "--html", str(folder)]
    assert main(cli) == 0
    assert "wrote 3 files" in capsys.readouterr().out
    api = _api(live)
    assert json.loads((folder / "board.json").read_text()) == api
    page = (folder / f"{TASK}.html").read_text()
    rows = re.findall(r'<tr data-entry="([^"]+)"', page)
    assert rows == [e["id"] for s in api["sections"] for e in s["entries"]]
    assert len(rows) == 6
    # Synthetic rows sit under their own heading, after every real row.
    assert page.index("Synthetic data") > page.rindex('data-data="real"')
    assert page.index("Synthetic data") < page.index('data-data="synthetic"')
    index = (folder / "index.html").read_text()
    assert f'href="{TASK}.html"' in index and 'href="board.json"' in index
    hrefs = re.findall(r'href="([^"]+)"', page)
    assert all(h.startswith(live["url"]) or "/" not in h for h in hrefs), hrefs
    # A run link works on the master that made the board (the bundle download too).
    bundle = next(h for h in hrefs if h.endswith("/bundle/"))
    got = requests.get(bundle, headers={"Authorization": f"Token {live['token']}"}, timeout=60)
    assert got.status_code == 200


def test_the_board_with_filters_prints_the_api_ranking(live, capsys, monkeypatch):
    cli = ["--url", live["url"], "--token", live["token"], "board", "--workers", "2"]
    assert main([*cli, "--wide"]) == 0
    out = capsys.readouterr().out
    api = _api(live, workers=2)
    # Each section: its title, then its entries as a table (RANK, SCORE, ...), in order.
    lines = out.splitlines()
    titles = [lines[i - 1] for i, line in enumerate(lines) if line.startswith("RANK ")]
    assert titles == [s["label"] for s in api["sections"]]
    ranks = [
        line.split("  ")[0].strip() for line in lines if line[:1].isdigit() or line[:2] == "- "
    ]
    assert ranks == [str(e["rank"] or "-") for s in api["sections"] for e in s["entries"]]
    assert "imported" in out and any(
        line.startswith("1 ") and "30.0 s to target (median)" in line for line in lines
    )
    monkeypatch.setenv("COLUMNS", "120")  # a terminal of 120 columns
    assert main(cli) == 0  # the default view: the medians' scores, titles wrapped to fit
    out = capsys.readouterr().out
    assert "SCORE (MEDIAN)" in out and max(len(line) for line in out.splitlines()) <= 120


def test_anonymous_board_only_where_reads_are_public(live, settings, tmp_path, capsys):
    cli = ["--url", live["url"], "board", "--html", str(tmp_path / "anon")]
    settings.MLBENCH_PUBLIC_READ = False
    assert main(cli) == 4
    assert not (tmp_path / "anon").exists()
    settings.MLBENCH_PUBLIC_READ = True
    assert main(cli) == 0
    assert (tmp_path / "anon" / "board.json").is_file()


def _ranks(out: str) -> list[str]:
    lines = out.splitlines()
    return [line.split("  ")[0].strip() for line in lines if line[:1].isdigit() or line[:2] == "- "]


def test_the_terminal_reads_one_page_and_says_how_to_read_the_next(live, capsys):
    cli = ["--url", live["url"], "--token", live["token"], "board"]
    whole = [str(e["rank"] or "-") for s in _api(live)["sections"] for e in s["entries"]]
    assert len(whole) == 6
    assert main([*cli, "--limit", "4"]) == 0
    out = capsys.readouterr().out
    assert _ranks(out) == whole[:4]
    assert "entries 1 to 4 of 6; the next page: --offset 4 (or --all for every entry)" in out
    assert main([*cli, "--limit", "4", "--offset", "4"]) == 0
    out = capsys.readouterr().out
    assert _ranks(out) == whole[4:] and "the next page" not in out
    assert main([*cli, "--all"]) == 0  # the whole board, as the API answers it unpaged
    out = capsys.readouterr().out
    assert _ranks(out) == whole and "the next page" not in out
    assert main([*cli, "--json", "--limit", "2", "--offset", "1"]) == 0
    page = json.loads(capsys.readouterr().out)
    assert page == _api(live, limit=2, offset=1) and page["next_offset"] == 3
    assert main([*cli, "--offset", "9"]) == 0  # past the last entry: said, not an error
    assert "no entries past --offset" in capsys.readouterr().out


def test_a_page_asked_wrongly_is_a_usage_error_naming_the_option(live, capsys):
    cli = ["--url", live["url"], "--token", live["token"], "board"]
    for args, says in [
        (["--limit", "0"], "--limit 0: a whole number from 1 to 1000"),
        (["--limit", "1001"], "--limit 1001: a whole number from 1 to 1000"),
        (["--offset", "-1"], "--offset -1: 0 or more"),
        (["--limit", "5", "--all"], "--all reads every entry: leave them out"),
        (["--offset", "5", "--html", "x"], "--html writes the whole board: leave them out"),
    ]:
        assert main([*cli, *args]) == 2, args
        assert says in capsys.readouterr().err, args
