"""What a cluster's machines cost, from the list shipped with the client (cloud_prices.json).

Why shipped and dated rather than fetched: the providers' price APIs need accounts (AWS's
Price List API) or keys (Google's Cloud Billing Catalog), and a benchmark's cost must say
which price it used. So the list is a file in the package with its date and, for every
number, the page it was read from; `mlbench cluster create` sends the lines of its machine
type to the master's price table (a run's nodes are priced by machine type:
mlbench_master/cluster/node_kinds.py) and a user overrides any of them with
`mlbench prices set`. Spot and preemptible prices change daily and are not in the list;
a spot cluster's runs stay "not priced" until someone gives one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from mlbench_worker.client.clusters.spec import ClusterSpec

LIST = Path(__file__).with_name("cloud_prices.json")
ON_DEMAND = "on-demand"
PREEMPTIBLE = "preemptible"  # the master's word for spot and preemptible alike


@cache
def price_list() -> dict[str, Any]:
    return json.loads(LIST.read_text())


def machine(provider: str, machine_type: str) -> dict[str, Any] | None:
    """The list's entry for a machine type (vCPUs, memory, GPUs, price), if it has one."""
    return price_list().get(provider, {}).get("machines", {}).get(machine_type)


def machine_types(provider: str) -> list[str]:
    return list(price_list().get(provider, {}).get("machines", {}))


def region_of(spec: ClusterSpec) -> str:
    """The region a price applies to: a zone's region (us-central1-a -> us-central1)."""
    if spec.region:
        return spec.region
    return spec.zone.rsplit("-", 1)[0] if spec.zone.count("-") >= 2 else spec.zone


@dataclass
class Priced:
    """The price table lines for a cluster's nodes, or why there are none."""

    lines: list[dict[str, Any]]
    note: str  # what a user should know: the source, or why not priced and the fix


def node_price(provider: str, machine_type: str, gpus: int = 0, gpu_type: str = "") -> float | None:
    """One node's on-demand price per hour: the machine's, plus its attached GPUs on Google
    Cloud (an AWS instance type's price includes its GPUs). None where the list lacks it."""
    entry = machine(provider, machine_type)
    if entry is None:
        return None
    price = float(entry["on_demand"])
    if provider == "gcloud" and gpus:
        gpu = price_list()["gcloud"].get("gpus", {}).get(gpu_type)
        if gpu is None:
            return None
        price += gpus * float(gpu["on_demand"])
    return round(price, 6)


def _line(node_kind: str, pricing: str, price: float, source: str) -> dict[str, Any]:
    data = price_list()
    return {
        "node_kind": node_kind,
        "pricing": pricing,
        "price_per_hour": price,
        "currency": data["currency"],
        "source": source,
        "as_of": data["as_of"],
    }


def for_cluster(spec: ClusterSpec) -> Priced:
    """The price table lines a new cluster's runs are priced by (its machine type, the
    node kind its worker pods select), or a note saying why none and what to do."""
    if spec.provider == "kind":
        return Priced([], "kind runs on this machine: price it with `mlbench prices set-local`")
    how = (
        f"`mlbench prices set {spec.machine_type} PRICE_PER_HOUR"
        f"{' --preemptible' if spec.spot else ''} --source WHERE_FROM --as-of YYYY-MM-DD`"
    )
    if spec.spot:
        return Priced([], f"spot prices change daily and are not in the shipped list: {how}")
    listed = price_list()[spec.provider]
    region = region_of(spec)
    if region not in listed["regions"]:
        return Priced(
            [],
            f"the shipped list has {spec.provider} prices for {', '.join(listed['regions'])} "
            f"only, not {region}: {how}",
        )
    price = node_price(spec.provider, spec.machine_type, spec.gpus, spec.gpu_type)
    if price is None:
        return Priced([], f"{spec.machine_type} is not in the shipped list: {how}")
    gpus = f" + {spec.gpus} x {spec.gpu_type}" if spec.provider == "gcloud" and spec.gpus else ""
    source = f"{listed['source']}{gpus}; mlbench's shipped list of {price_list()['as_of']}"
    return Priced(
        [_line(spec.machine_type, ON_DEMAND, price, source)],
        f"{spec.machine_type}{gpus}: {price:g} {price_list()['currency']} an hour a node "
        f"(on-demand, {region}, as of {price_list()['as_of']})",
    )


def local_line(provider: str, machine_type: str, pricing: str = ON_DEMAND) -> dict[str, Any]:
    """The price table line that prices this machine (node kind "local") as the named cloud
    machine would cost; KeyError naming the choices where the list lacks it."""
    price = node_price(provider, machine_type)
    if price is None or pricing != ON_DEMAND:
        offered = ", ".join(machine_types(provider)) or "none"
        raise KeyError(
            f"{provider} {machine_type} ({pricing}) is not in the shipped list; it has "
            f"{offered} (on-demand)"
        )
    source = (
        f"as {provider} {machine_type}: {price_list()[provider]['source']}; mlbench's shipped "
        f"list of {price_list()['as_of']}"
    )
    return _line("local", ON_DEMAND, price, source)
