"""Our client's bounded reads of the runs list against a live master (a real web server on
PostgreSQL): ApiClient.get_runs(limit=, offset=, ids=) and `mlbench runs --last N`; without
them, the whole list as the original client reads it."""

from __future__ import annotations

import json

import pytest

from mlbench_master.accounts.users import issue_user_token
from mlbench_master.api.models import Run
from mlbench_worker.client.api import ApiClient
from mlbench_worker.client.cli import main

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def five(live_server, settings, tmp_path, monkeypatch) -> tuple[str, str, list[Run]]:
    settings.MLBENCH_HOME = tmp_path
    monkeypatch.delenv("MLBENCH_TOKEN", raising=False)
    monkeypatch.setenv("MLBENCH_HOME", str(tmp_path / "client-home"))
    made = [Run.objects.create(name=f"run {i}", state=Run.FINISHED) for i in range(5)]
    return live_server.url, issue_user_token("alice", create_user=True), made[::-1]


def test_the_client_reads_a_page_the_picked_runs_or_every_run(five):
    url, token, newest_first = five
    ids = [r.pk for r in newest_first]
    with ApiClient(url=url, token=token, in_cluster=False, load_config=False) as client:
        whole = client.get_runs().result().json()
        page = client.get_runs(limit=2, offset=1).result().json()
        picked = client.get_runs(ids=[ids[4], ids[0]]).result().json()
        refused = client.get_runs(limit=0).result()
    assert [r["id"] for r in whole] == ids
    assert (page["count"], page["next_offset"]) == (5, 3)
    assert [r["id"] for r in page["results"]] == ids[1:3]
    assert [r["id"] for r in picked] == [ids[0], ids[4]]
    assert refused.status_code == 400 and "limit" in refused.json()["errors"]


def test_mlbench_runs_last_n(five, capsys):
    url, token, newest_first = five
    argv = ["--url", url, "--token", token, "runs", "--json"]
    assert main([*argv, "--last", "2"]) == 0
    assert [r["id"] for r in json.loads(capsys.readouterr().out)] == [
        r.pk for r in newest_first[:2]
    ]
    assert main(argv) == 0
    assert len(json.loads(capsys.readouterr().out)) == 5
    assert main([*argv, "--last", "0"]) != 0  # the API's 400, said
    assert "limit" in capsys.readouterr().err
