"""Concurrent batch posts over real HTTP (live_server, threads): every point stored once."""

import concurrent.futures as cf

import pytest
import requests

from mlbench_master.api.models import Metric, Run
from mlbench_master.runs import lifecycle


@pytest.mark.django_db(transaction=True)
def test_concurrent_batches_with_overlapping_uids(live_server, settings):
    settings.MLBENCH_PODS_REFRESH_SECONDS = 0
    run = Run.objects.create(name="concurrent", state=Run.STARTED)
    token = lifecycle.worker_token(run)
    url = f"{live_server.url}/api/metrics/"

    def post(client: int) -> list[int]:
        codes = []
        with requests.Session() as s:
            s.headers["Authorization"] = f"Token {token}"
            for batch in range(5):
                # clients 0/1 and 2/3 send the same uids: retries racing each other
                points = [
                    {"run_id": run.pk, "name": f"m{i % 3}", "value": i,
                     "uid": f"c{client // 2}-b{batch}-{i}"}
                    for i in range(200)
                ]  # fmt: skip
                codes.append(s.post(url, json=points, timeout=60).status_code)
        return codes

    with cf.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(post, range(4)))
    assert all(code == 201 for codes in results for code in codes), results
    assert Metric.objects.filter(run=run).count() == 2 * 5 * 200
    assert Metric.objects.values("uid").distinct().count() == 2000

    # and the data reads back over HTTP, summarized
    r = requests.get(
        f"{live_server.url}/api/metrics/{run.pk}/?metric_type=run&summarize=10",
        headers={"Authorization": f"Token {_user_token()}"},
        timeout=60,
    )
    assert r.status_code == 200
    body = r.json()
    assert sorted(body) == ["m0", "m1", "m2"]
    assert all(1 <= len(points) <= 10 for points in body.values())


def _user_token() -> str:
    from mlbench_master.accounts.users import issue_user_token

    return issue_user_token("reader", create_user=True)
