"""The shipped price list reaching the master's price table: the lines `mlbench cluster
create` sends for its machines price a run on those nodes (the chart's values select the
machine type the run's nodes are priced by); `mlbench prices set-local` prices this
machine as a cloud machine type; `mlbench prices set` overrides a line in place; what the
list lacks is refused naming what it has (a live server on stored rows)."""

from __future__ import annotations

import pytest

from mlbench_master.cluster import node_kinds
from mlbench_worker.client.cli.master import Master
from mlbench_worker.client.cli.price_lines import set_price
from mlbench_worker.client.clusters import install, prices
from mlbench_worker.client.clusters.spec import ClusterSpec

pytestmark = pytest.mark.django_db(transaction=True)

EVALS = [(10.0, 0.6, 1), (20.0, 0.85, 2)]  # the light target (0.8) reached at 20 s


def test_a_new_clusters_prices_cost_its_runs(stored_cli, live_server):
    spec = ClusterSpec("gcloud", "g1", nodes=2, machine_type="n1-standard-8", gpus=1,
                       gpu_type="nvidia-tesla-t4", zone="us-central1-a")  # fmt: skip
    priced = prices.for_cluster(spec)
    assert [line["node_kind"] for line in priced.lines] == ["n1-standard-8"]
    per_node = 0.379998 + 0.35  # the machine's list price and its T4's
    assert priced.lines[0]["price_per_hour"] == pytest.approx(per_node)
    assert "cloud.google.com" in priced.lines[0]["source"] and "1 x nvidia-tesla-t4" in priced.note
    token = stored_cli.api._credentials["HTTP_AUTHORIZATION"].split()[1]
    stored = set_price(Master(live_server.url, token), priced.lines[0])
    assert stored["as_of"] == prices.price_list()["as_of"]
    # A run whose two worker pods ran on two nodes the chart's selector put them on.
    selector = install.values_for(spec)["worker"]["nodeSelector"]
    nodes = node_kinds.kubernetes_nodes(["gke-a", "gke-b"], selector)
    run = stored_cli.maker.run(None, 1, 2, EVALS, nodes=nodes, seconds=3600.0)
    cost = stored_cli.api.get(f"/api/runs/{run.pk}/").json()["cost"]
    assert cost["priced"] and cost["per_hour"] == pytest.approx(2 * per_node)
    assert cost["whole_run"]["cost"] == pytest.approx(2 * per_node)
    # Sent again (a resumed create): the line is changed, not doubled.
    set_price(Master(live_server.url, token), {**priced.lines[0], "price_per_hour": 1.0})
    table = stored_cli.api.get("/api/prices/").json()
    assert [(r["node_kind"], r["price_per_hour"]) for r in table] == [("n1-standard-8", 1.0)]


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        (
            ClusterSpec(
                "gcloud", "s", machine_type="e2-standard-4", zone="us-central1-a", spot=True
            ),
            "spot prices change daily",
        ),  # fmt: skip
        (
            ClusterSpec("aws", "r", machine_type="m5.xlarge", region="eu-west-1"),
            "us-east-1 only, not eu-west-1",
        ),  # fmt: skip
        (
            ClusterSpec("aws", "u", machine_type="x9.huge", region="us-east-1"),
            "x9.huge is not in the shipped list",
        ),  # fmt: skip
        (ClusterSpec("kind", "k"), "mlbench prices set-local"),
    ],
    ids=["spot", "region", "machine", "kind"],
)
def test_what_the_list_cannot_price_is_said_with_the_fix(spec, words):
    priced = prices.for_cluster(spec)
    assert priced.lines == [] and words in priced.note


def test_this_machine_priced_as_a_cloud_machine_and_a_line_overridden(stored_cli, capsys):
    assert stored_cli("prices", "set-local", "aws", "m5.xlarge") == 0
    assert "local (on-demand): 0.192 USD an hour" in capsys.readouterr().out
    run = stored_cli.maker.run(None, 1, 2, EVALS, nodes=node_kinds.local_nodes(2), seconds=1800)
    cost = stored_cli.api.get(f"/api/runs/{run.pk}/").json()["cost"]
    assert (
        cost["per_hour"] == pytest.approx(0.192) and "aws.amazon.com" in cost["nodes"][0]["source"]
    )
    assert stored_cli("prices", "set", "local", "0.5", "--source", "our invoice",
                      "--as-of", "2026-11-30") == 0  # fmt: skip
    table = stored_cli.api.get("/api/prices/").json()
    assert [(r["node_kind"], r["price_per_hour"], r["source"]) for r in table] == [
        ("local", 0.5, "our invoice")
    ]
    assert stored_cli("prices", "list") == 0
    assert "our invoice" in capsys.readouterr().out
    # What the list lacks: refused with what it has, the table unchanged.
    assert stored_cli("prices", "set-local", "gcloud", "n9-giant") == 2
    err = capsys.readouterr().err
    assert "n9-giant" in err and "e2-standard-4" in err
    assert stored_cli("prices", "set", "local", "-1", "--source", "x", "--as-of", "2026-11-30") == 2
    assert "negative" in capsys.readouterr().err
    assert len(stored_cli.api.get("/api/prices/").json()) == 1
