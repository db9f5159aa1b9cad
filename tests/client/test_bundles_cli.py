"""`mlbench export` from one master and `mlbench import` into another: two live masters on
real PostgreSQL, each with its own database and its own key. The origin is this test's web
server (its database holds a finished series, stored as a run stores it); the other is the
session's embedded master (tests/client/conftest.py), which has never seen these runs."""

from __future__ import annotations

import io
import zipfile

import pytest
import requests
from rest_framework.test import APIClient

from mlbench_master.accounts.users import issue_user_token
from mlbench_master.grading import scoring
from mlbench_worker.client.cli import main
from tests.bundles import data

pytestmark = pytest.mark.django_db(transaction=True)


def _get(url: str, token: str, path: str) -> dict:
    response = requests.get(url + path, headers={"Authorization": f"Token {token}"}, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture
def origin(live_server, settings, tmp_path):
    settings.MLBENCH_HOME = tmp_path / "origin"
    settings.MLBENCH_CLUSTER = "local"
    settings.MLBENCH_PUBLIC_READ = False
    scoring.forget_evaluators()
    token = issue_user_token("exporter", create_user=True, superuser=True)
    staff = APIClient()
    staff.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return {"url": live_server.url, "token": token, "series": data.finished_series(staff)}


def test_a_series_exported_with_the_cli_is_imported_into_another_master(
    origin, master, tmp_path, capsys
):
    url, token, series = origin["url"], origin["token"], origin["series"]
    file = tmp_path / "series.zip"
    cli_a = ["--url", url, "--token", token]
    assert main([*cli_a, "export", "--series", str(series.pk), "-o", str(file)]) == 0
    me = _get(url, token, "/api/installation/")
    assert f"signed by installation {me['fingerprint']}" in capsys.readouterr().out

    cli_b = ["--url", master.url, "--token", master.token]
    assert main([*cli_b, "import", str(file)]) == 0
    out = capsys.readouterr().out
    assert "2 runs stored" in out and me["fingerprint"] in out
    series_b = int(out.split("  series ")[1].split(":")[0])
    there = _get(master.url, master.token, f"/api/series/{series_b}/")
    here = _get(url, token, f"/api/series/{series.pk}/")
    assert there["origin"]["fingerprint"] == me["fingerprint"]
    assert data.without_run_ids(there["statistics"]) == data.without_run_ids(here["statistics"])
    b_key = _get(master.url, master.token, "/api/installation/")["public_key"]
    assert b_key != me["public_key"]  # two installations
    for a_run, b_run in zip(here["runs"], there["runs"], strict=True):
        a, b = a_run["id"], b_run["id"]
        run_a = _get(url, token, f"/api/runs/{a}/")
        run_b = _get(master.url, master.token, f"/api/runs/{b}/")
        assert (
            run_b["origin"]["origin_run"] == a
            and run_b["origin"]["regrade"]["status"] == "re-graded"
        )
        for field in ("name", "state", "summary", "manifest", "seed", "num_workers", "task",
                      "started_at", "finished_at", "evaluation"):  # fmt: skip
            assert run_b[field] == run_a[field], field
        metrics = "/api/metrics/{}/?metric_type=run&details=1"
        assert _get(master.url, master.token, metrics.format(b)) == _get(
            url, token, metrics.format(a)
        )
        logs_a = [
            (c["rank"], c["stream"], c["text"])
            for c in _get(url, token, f"/api/runs/{a}/logs/")["chunks"]
        ]
        logs_b = [(c["rank"], c["stream"], c["text"]) for c in master.logs(b)]
        assert logs_b == logs_a and logs_a

    # Imported twice: one copy.
    count = len(_get(master.url, master.token, "/api/runs/"))
    assert main([*cli_b, "import", str(file)]) == 0
    assert "0 runs stored" in capsys.readouterr().out
    assert len(_get(master.url, master.token, "/api/runs/")) == count

    # A byte changed: refused naming the member; the master keeps serving, nothing stored.
    with zipfile.ZipFile(file) as zf:
        files = {n: zf.read(n) for n in zf.namelist()}
    target = next(n for n in files if n.endswith("logs.jsonl"))
    files[target] = files[target].replace(b"line 1", b"line 7", 1)
    bad = tmp_path / "bad.zip"
    bad.write_bytes(data.rezip(files))
    assert main([*cli_b, "import", str(bad)]) == 2
    err = capsys.readouterr().err
    assert target in err and "SHA-256" in err
    assert len(_get(master.url, master.token, "/api/runs/")) == count
    assert zipfile.is_zipfile(io.BytesIO(file.read_bytes()))


def test_export_says_what_cannot_be_exported(origin, capsys, tmp_path):
    cli_a = ["--url", origin["url"], "--token", origin["token"]]
    assert main([*cli_a, "export", "-o", str(tmp_path / "x.zip")]) == 2
    assert "give RUN... or --series ID" in capsys.readouterr().err
    assert main([*cli_a, "export", "999999"]) == 5
    runs = sorted(r.pk for r in origin["series"].runs.all())
    out = tmp_path / "two.zip"
    assert main([*cli_a, "export", *map(str, runs), "-o", str(out)]) == 0
    assert data.manifest(out.read_bytes())["runs"] == runs
    assert not list(tmp_path.glob(".*.part"))
