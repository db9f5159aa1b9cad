"""A run's cost (results/cost.py) and a series' cost statistics, against hand computations
from the stored rows; prices copied when a run is created; unpriced runs said so."""

from __future__ import annotations

import pytest

from mlbench_master.api.models import NodePrice
from mlbench_master.cluster import node_kinds
from mlbench_master.results.statistics import for_series

pytestmark = pytest.mark.django_db

# Two worker pods on one n1-standard-4 node and one on node-b, as the Kubernetes driver
# records them when the chart's worker.nodeSelector names the machine type.
K8S_NODES = node_kinds.kubernetes_nodes(
    ["node-a", "node-a", "node-b"], {"node.kubernetes.io/instance-type": "n1-standard-4"}
)
EVALS = [(10.0, 0.6, 1), (20.0, 0.85, 2), (30.0, 0.9, 3)]  # target 0.8 reached at 20 s


def price(api, kind: str, per_hour: str, **extra) -> dict:
    body = {"node_kind": kind, "price_per_hour": per_hour, "currency": "USD",
            "source": "https://cloud.google.com/compute/vm-instance-pricing",
            "as_of": "2026-11-01", **extra}  # fmt: skip
    response = api.post("/api/prices/", body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def test_the_cost_of_a_stored_run_equals_a_hand_computation(maker, staff_api):
    price(staff_api, "n1-standard-4", "0.19")  # node-a's machine type
    price(staff_api, "node-b", "0.5")  # a price for that one node wins over its type's
    price(staff_api, "kubernetes", "9.99")  # the cluster's: never reached here
    run = maker.run(None, 1, 3, EVALS, nodes=K8S_NODES, seconds=120.0)
    cost = staff_api.get(f"/api/runs/{run.pk}/").json()["cost"]
    per_hour = 0.19 + 0.5  # node-a once (two workers on it), node-b once
    assert cost["priced"] is True and cost["reason"] == "" and cost["currency"] == "USD"
    assert cost["per_hour"] == pytest.approx(per_hour)
    assert [(n["name"], n["node_kind"], n["workers"]) for n in cost["nodes"]] == [
        ("node-a", "n1-standard-4", 2),
        ("node-b", "node-b", 1),
    ]
    assert cost["to_target"] == {"seconds": 20.0, "cost": pytest.approx(20.0 * per_hour / 3600)}
    assert cost["whole_run"] == {"seconds": 120.0, "cost": pytest.approx(120 * per_hour / 3600)}
    assert cost["nodes"][0]["source"].startswith("https://cloud.google.com")
    assert cost["nodes"][0]["as_of"] == "2026-11-01"


def test_a_price_changed_after_the_run_does_not_change_its_cost(maker, staff_api):
    line = price(staff_api, "local", "2.0")
    nodes = node_kinds.local_nodes(2)  # one machine, both workers on it
    before = maker.run(None, 1, 2, EVALS, nodes=nodes, seconds=60.0)
    first = staff_api.get(f"/api/runs/{before.pk}/").json()["cost"]
    assert first["whole_run"]["cost"] == pytest.approx(60 * 2.0 / 3600)
    changed = staff_api.patch(f"/api/prices/{line['id']}/", {"price_per_hour": 5}, format="json")
    assert changed.status_code == 200 and changed.json()["price_per_hour"] == 5
    after = maker.run(None, 2, 2, EVALS, nodes=nodes, seconds=60.0)
    assert staff_api.get(f"/api/runs/{before.pk}/").json()["cost"] == first
    assert staff_api.get(f"/api/runs/{after.pk}/").json()["cost"]["per_hour"] == 5
    assert staff_api.delete(f"/api/prices/{line['id']}/").status_code == 204
    assert staff_api.get(f"/api/runs/{before.pk}/").json()["cost"] == first


@pytest.mark.parametrize(
    ("table", "nodes", "reason"),
    [
        ([], node_kinds.local_nodes(1), "not priced: the price table was empty when the run "
         "was created"),
        ([("slurm-gpu", "1")], node_kinds.slurm_nodes(2, "cpu"), "not priced: the price "
         "table had no price for a node (kinds tried: cpu, slurm) when the run was created"),
        ([("local", "1"), ("big", "1", "EUR")], [*node_kinds.local_nodes(1),
         node_kinds.node("b", ["big"], 1)], "not priced: its nodes are priced in more than "
         "one currency (EUR, USD)"),
        ([("local", "1")], [], "not priced: the run recorded no nodes (its workers were "
         "never launched)"),
    ],
)  # fmt: skip
def test_a_run_that_cannot_be_priced_says_why_never_zero(maker, staff_api, table, nodes, reason):
    for kind, per_hour, *currency in table:
        price(staff_api, kind, per_hour, currency=currency[0] if currency else "USD")
    run = maker.run(None, 1, 1, EVALS, nodes=nodes, seconds=60.0)
    cost = staff_api.get(f"/api/runs/{run.pk}/").json()["cost"]
    assert cost["priced"] is False and cost["reason"] == reason
    assert cost["to_target"] is None and cost["whole_run"] is None and cost["per_hour"] is None


def test_runs_made_before_prices_were_kept_are_not_priced(maker, staff_api):
    price(staff_api, "local", "1")
    run = maker.run(None, 1, 1, EVALS)  # a bare row, as made before the migration
    cost = staff_api.get(f"/api/runs/{run.pk}/").json()["cost"]
    assert cost["reason"] == "not priced: the run was created before this master kept prices"


def test_which_price_a_node_gets():
    from mlbench_master.results.prices import Price, price_of

    def p(kind: str, pricing: str, value: float) -> Price:
        return Price(kind, pricing, value, "USD", "list", "2026-11-01")

    table = [p("n1", "on-demand", 1.0), p("n1", "preemptible", 0.3), p("gpu", "preemptible", 2)]
    assert price_of(["node-x", "n1"], "", table).price_per_hour == 1.0
    assert price_of(["node-x", "n1"], "preemptible", table).price_per_hour == 0.3
    assert price_of(["gpu"], "", table).price_per_hour == 2  # its only price, whatever it is
    assert price_of(["node-x", "kubernetes"], "", table) is None
    spot = node_kinds.kubernetes_nodes(["a"], {"cloud.google.com/gke-spot": "true"})
    assert spot == [{"name": "a", "kinds": ["a", "kubernetes"], "workers": 1,
                     "capacity": "preemptible"}]  # fmt: skip


def test_series_cost_statistics_and_price_index_equal_a_hand_computation(maker, staff_api):
    price(staff_api, "n1-standard-4", "0.2")
    series = maker.series(seeds=[1, 2, 3], worker_counts=[1, 2])
    # seed -> time to target of the 1-worker and of the 2-worker run (None: not reached)
    times = {1: (40.0, 25.0), 2: (44.0, 21.0), 3: (50.0, None)}
    for seed, (one, two) in times.items():
        node = node_kinds.kubernetes_nodes
        selector = {"node.kubernetes.io/instance-type": "n1-standard-4"}
        maker.run(series, seed, 1, [(5.0, 0.5, 1), (one, 0.85, 2)],
                  nodes=node([f"n{seed}"], selector), seconds=100.0)  # fmt: skip
        evals = [(5.0, 0.5, 1), (two or 30.0, 0.85 if two else 0.7, 2)]
        maker.run(series, seed, 2, evals, nodes=node([f"a{seed}", f"b{seed}"], selector),
                  seconds=80.0)  # fmt: skip
    out = for_series(series)
    one, two = out["groups"]
    assert out["cost"] == {"currency": "USD", "priced": 6, "not_priced": [], "reason": ""}
    assert one["price_per_hour"] == pytest.approx(0.2) and two["price_per_hour"] == 0.4
    assert one["cost_to_target"]["median"] == pytest.approx(44.0 * 0.2 / 3600)
    assert two["cost_to_target"]["n"] == 2
    assert two["cost_to_target"]["median"] == pytest.approx(23.0 * 0.4 / 3600)
    assert two["run_cost"]["median"] == pytest.approx(80.0 * 0.4 / 3600)
    # Twice the price per hour for 44/23 the speed: (0.4 / 0.2) / (44 / 23).
    assert one["price_index"] == 1.0
    assert two["price_index"] == pytest.approx(2 / (44.0 / 23.0))
    curve = next(c for c in out["curves"] if c["num_workers"] == 2 and c["seed"] == 1)
    assert curve["cost_to_target"] == pytest.approx(25.0 * 0.4 / 3600)


def test_a_series_of_unpriced_runs_says_not_priced(maker, staff_api):
    series = maker.series(seeds=[1], worker_counts=[1, 2])
    for workers in (1, 2):
        maker.run(series, 1, workers, EVALS, nodes=node_kinds.local_nodes(workers))
    body = staff_api.get(f"/api/series/{series.pk}/").json()["statistics"]
    assert body["cost"]["currency"] is None and body["cost"]["priced"] == 0
    assert (
        body["cost"]["reason"] == "not priced: the price table was empty when the run was created"
    )
    assert all(g["price_index"] is None and g["cost_to_target"]["n"] == 0 for g in body["groups"])


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"price_per_hour": -1}, "price_per_hour", "a price per hour is 0 or more; -1"),
        ({"currency": None}, "currency", "null"),
        ({"currency": "dollars"}, "currency", "not a three-letter ISO 4217 currency code"),
        ({"source": "  "}, "source", "say where the price comes from"),
        ({"as_of": "yesterday"}, "as_of", "Date has wrong format"),
        ({"pricing": "spot"}, "pricing", "'spot' is not one of on-demand, preemptible"),
        ({"node_kind": ""}, "node_kind", "name the kind of node"),
        ({"discount": 0.1}, "discount", "unknown field"),
    ],
)
def test_bad_price_input_is_a_400_naming_the_field(staff_api, change, field, words):
    body = {"node_kind": "local", "price_per_hour": 1, "currency": "USD", "source": "list",
            "as_of": "2026-11-01"}  # fmt: skip
    body.update(change)
    response = staff_api.post("/api/prices/", body, format="json")
    assert response.status_code == 400, response.content
    assert words in " ".join(response.json()["errors"][field])
    assert response.json()["detail"].startswith(f"{field}: ")
    assert not NodePrice.objects.exists()


def test_missing_fields_and_a_second_price_of_a_kind_are_400s(staff_api):
    missing = staff_api.post("/api/prices/", {"node_kind": "local", "price_per_hour": 1},
                             format="json")  # fmt: skip
    assert missing.status_code == 400
    assert set(missing.json()["errors"]) == {"currency", "source", "as_of"}
    price(staff_api, "local", "1")
    twin = staff_api.post("/api/prices/", {"node_kind": "local", "price_per_hour": 2,
                          "currency": "USD", "source": "x", "as_of": "2026-11-02"},
                          format="json")  # fmt: skip
    assert twin.status_code == 400 and "already has a on-demand price" in twin.json()["detail"]


def test_only_staff_change_the_price_table(api, staff_api):
    line = price(staff_api, "local", "1")
    assert api.get("/api/prices/").json()[0]["node_kind"] == "local"
    refused = api.post("/api/prices/", {"node_kind": "x"}, format="json")
    assert refused.status_code == 403
    assert "only be changed by a staff user" in refused.json()["detail"]
    assert api.delete(f"/api/prices/{line['id']}/").status_code == 403
    assert NodePrice.objects.count() == 1


def test_the_prices_command_loads_a_file_whole_or_not_at_all(tmp_path, capsys):
    import json

    from django.core.management import CommandError, call_command

    line = {"node_kind": "local", "price_per_hour": 0.35, "currency": "usd", "source": "own",
            "as_of": "2026-11-01"}  # fmt: skip
    good = tmp_path / "prices.json"
    good.write_text(json.dumps([line, {**line, "pricing": "preemptible", "price_per_hour": 0.1}]))
    call_command("mlbench_prices", "--load", str(good))
    shown = json.loads(capsys.readouterr().out)
    assert [(p["pricing"], p["price_per_hour"], p["currency"]) for p in shown] == [
        ("on-demand", 0.35, "USD"),
        ("preemptible", 0.1, "USD"),
    ]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{**line, "node_kind": "n2"}, {**line, "price_per_hour": -2}]))
    with pytest.raises(CommandError, match=r"line \[1\]: price_per_hour: a price per hour is 0"):
        call_command("mlbench_prices", "--load", str(bad))
    assert sorted(NodePrice.objects.values_list("node_kind", "pricing")) == [
        ("local", "on-demand"),
        ("local", "preemptible"),
    ]


def test_the_cost_chart_draws_the_statistics_or_says_why_not(maker, staff_api):
    from tests.client.test_plots import described

    series = maker.series(seeds=[1], worker_counts=[1, 2])
    for workers in (1, 2):
        maker.run(series, 1, workers, EVALS, nodes=node_kinds.local_nodes(workers))
    refused = staff_api.get(f"/api/series/{series.pk}/plots/cost.svg")
    assert refused.status_code == 409
    assert refused.json()["detail"] == (
        "no cost to draw: not priced: the price table was empty when the run was created"
    )
    price(staff_api, "local", "1.5")
    priced = maker.series(seeds=[1], worker_counts=[1, 2])
    for workers, at in ((1, 30.0), (2, 20.0)):
        evals = [(10.0, 0.5, 1), (at, 0.85, 2)]
        maker.run(priced, 1, workers, evals, nodes=node_kinds.local_nodes(workers))
    svg = staff_api.get(f"/api/series/{priced.pk}/plots/cost.svg")
    assert svg.status_code == 200, svg.content
    stats = staff_api.get(f"/api/series/{priced.pk}/").json()["statistics"]
    drawn = described(svg.content, "svg")["lines"]
    groups = stats["groups"]
    assert drawn["cost_to_target"] == [
        [g["num_workers"], g["cost_to_target"]["median"]] for g in groups
    ]
    assert drawn["price_index"] == [[1, 1.0], [2, pytest.approx(20.0 / 30.0)]]
