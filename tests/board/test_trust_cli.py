"""`mlbench trust add|list|remove`, `mlbench board` and `mlbench show` against a live master
(this test's web server on real PostgreSQL) holding the board's runs, one imported from an
installation this master does not trust yet."""

from __future__ import annotations

import json

import pytest

from mlbench_master.accounts.users import issue_user_token
from mlbench_master.bundles import signing
from mlbench_worker.client.cli import main
from tests.board.stored import TASK, prepared

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def live(live_server, settings, monkeypatch, tmp_path):
    stored = prepared(settings, tmp_path, trust_origin=False)
    monkeypatch.delenv("MLBENCH_TOKEN", raising=False)
    monkeypatch.setenv("MLBENCH_HOME", str(tmp_path / "client-home"))
    staff = issue_user_token("root")
    reader = issue_user_token("reader", create_user=True)

    def cli(*argv: str, token: str = staff) -> int:
        return main(["--url", live_server.url, "--token", token, *argv])

    cli.reader = reader
    return cli, stored


def _imported_line(out: str, fingerprint: str) -> str:
    return next(line for line in out.splitlines() if fingerprint in line and "imported" in line)


def test_trust_commands_rank_and_unrank_an_origin(live, capsys):
    cli, stored = live
    fp, key = stored.origin_fingerprint, stored.origin_key
    assert cli("board", "--task", TASK, "--wide") == 0
    line = _imported_line(capsys.readouterr().out, fp)
    assert line.startswith("-  ") and "unverified origin" in line
    assert cli("show", str(stored.runs["imported"].pk)) == 0
    shown = capsys.readouterr().out
    assert f"installation {fp}, unverified origin (not ranked" in shown

    assert cli("trust", "add", key, "--name", "Lab A", token=cli.reader) == 4  # not staff
    assert cli("trust", "add", "not-a-key", "--name", "Lab A") == 2
    assert "key: not an Ed25519 public key" in capsys.readouterr().err
    assert cli("trust", "add", key, "--name", "Lab A") == 0
    assert f"trusted {fp} as 'Lab A': its imported runs (1 run here) rank" in (
        capsys.readouterr().out
    )
    assert cli("trust", "add", key, "--name", "Lab B") == 6
    assert "trusted already as 'Lab A'" in capsys.readouterr().err
    assert cli("board", "--task", TASK, "--wide") == 0
    line = _imported_line(capsys.readouterr().out, fp)
    assert line.startswith("1     30.0 s to target") and "trusted (Lab A)" in line
    assert "graded on the whole test set (100,000 examples)" in line
    assert cli("show", str(stored.runs["imported"].pk)) == 0
    assert f"installation {fp}, trusted (Lab A)" in capsys.readouterr().out

    assert cli("trust", "list") == 0
    out = capsys.readouterr().out
    me = signing.this_installation()
    assert f"{me.fingerprint}  this installation (own key, always trusted)" in out
    assert f"{fp}  Lab A" in out
    assert cli("trust", "list", "--json") == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(k["name"], k["runs"]) for k in listed] == [("this installation", 0), ("Lab A", 1)]

    assert cli("trust", "remove", me.fingerprint) == 6
    assert "cannot be removed" in capsys.readouterr().err
    assert cli("trust", "remove", fp.replace(":", "").upper()) == 0
    assert "its imported runs (1 run here) are unverified again" in capsys.readouterr().out
    assert cli("trust", "remove", key) == 5
    assert cli("board", "--task", TASK, "--wide") == 0
    assert _imported_line(capsys.readouterr().out, fp).startswith("-  ")
