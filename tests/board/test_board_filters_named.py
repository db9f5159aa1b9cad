"""A board filter no entry could ever match is named with what it accepts (a 400, and
`mlbench board` exits non-zero saying it), never answered "no results match" (issue 50).
A value of the right kind that matches nothing now is still an empty board."""

from __future__ import annotations

import pytest

from mlbench_master.accounts.users import issue_user_token
from mlbench_worker.client.cli import main

TEXT_FILTERS = ("origin", "hardware", "algorithm", "implementation", "network", "backend")


@pytest.fixture
def staff(db):
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {issue_user_token('root', create_user=True)}")
    return client


@pytest.mark.parametrize("name", TEXT_FILTERS)
def test_a_bogus_text_filter_is_named_with_what_it_accepts(staff, name):
    response = staff.get("/api/results/", {name: "bogus"})
    assert response.status_code == 400, response.json()
    detail = response.json()["detail"]
    assert detail.startswith(f"{name}: 'bogus' is not "), detail


@pytest.mark.parametrize(
    ("name", "accepted"),
    [
        ("origin", "local, imported, trusted, unverified"),
        ("algorithm", "allreduce"),
        ("implementation", "reference"),
        ("backend", "mpi, gloo, nccl"),
        ("hardware", "cores per worker"),
        ("network", "Mbit/s"),
    ],
)
def test_the_refusal_lists_the_accepted_values(staff, name, accepted):
    assert accepted in staff.get("/api/results/", {name: "bogus"}).json()["detail"]


@pytest.mark.parametrize(
    "query",
    [
        {"origin": "LOCAL"},
        {"origin": "abcd:0123:4567:89ef"},
        {"algorithm": "PowerSGD"},
        {"implementation": "torch-ddp"},
        {"backend": "GLOO"},
        {"hardware": "GPU y, 1 core per worker"},
        {"hardware": "CPU Intel(R) Xeon(R), 0.5 cores per worker"},
        {"network": "100 Mbit/s"},
        {"network": "10 Mbit/s, 2.5 ms latency"},
    ],
)
def test_a_value_of_the_right_kind_is_a_filter_even_when_nothing_matches(staff, query):
    response = staff.get("/api/results/", query)
    assert response.status_code == 200, response.json()


@pytest.mark.django_db(transaction=True)
def test_mlbench_board_exits_non_zero_naming_the_filter(live_server, monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("MLBENCH_TOKEN", raising=False)
    monkeypatch.setenv("MLBENCH_HOME", str(tmp_path))
    token = issue_user_token("root", create_user=True, superuser=True)
    code = main(["--url", live_server.url, "--token", token, "board", "--origin", "bogus"])
    said = capsys.readouterr()
    assert code != 0
    text = said.out + said.err
    assert "origin: 'bogus' is not one of local, imported" in text, text
    assert "no results" not in text


def test_a_name_a_stored_run_has_is_a_filter_though_no_catalogue_lists_it(staff):
    """An imported run's (or a retired) algorithm heads its entries: it filters the board."""
    from mlbench_master.api.models import Run

    assert staff.get("/api/results/", {"algorithm": "retired-sgd"}).status_code == 400
    Run.objects.create(name="old", algorithm="retired-sgd")
    response = staff.get("/api/results/", {"algorithm": "Retired-SGD"})
    assert response.status_code == 200, response.json()
    assert "retired-sgd" in staff.get("/api/results/", {"algorithm": "x"}).json()["detail"]
