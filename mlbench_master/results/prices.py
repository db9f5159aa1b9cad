"""The operator's price table, the copy of it each run keeps, and which price a node gets.

Why a copy per run: a cost must not change when the operator edits the table next month
(a new price list, a discount), so `runs.new_run` stores `snapshot()` on the run row and
every cost is computed from that copy (cost.py), never from the table as it is now.

Which price a node gets (`price_of`, docs/results.rst says the same): the node's kinds are
tried in order, most specific first (cluster/node_kinds.py: node name, machine type or
Slurm partition, cluster kind); the first kind the copy has prices for wins. A kind with
one price (on-demand or preemptible) gives that price; a kind with both gives the
preemptible one for a node known to be preemptible, the on-demand one otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from mlbench_master.api.models import NodePrice

# The version of the copy's layout, so a reader can tell a future layout apart.
FORMAT = 1


@dataclass(frozen=True)
class Price:
    """One line of a run's copy of the table."""

    node_kind: str
    pricing: str
    price_per_hour: float
    currency: str
    source: str
    as_of: str

    def record(self) -> dict[str, Any]:
        return {
            "node_kind": self.node_kind,
            "pricing": self.pricing,
            "price_per_hour": self.price_per_hour,
            "currency": self.currency,
            "source": self.source,
            "as_of": self.as_of,
        }


def entry(row: NodePrice) -> Price:
    return Price(
        node_kind=row.node_kind,
        pricing=row.pricing,
        price_per_hour=float(row.price_per_hour),
        currency=row.currency,
        source=row.source,
        as_of=str(row.as_of),
    )


def snapshot() -> dict[str, Any]:
    """The table as it stands now, for a new run's row ({"entries": []} when empty: the
    run was made with no prices, and says so)."""
    return {
        "format": FORMAT,
        "taken_at": timezone.now().isoformat(),
        "entries": [
            entry(row).record() for row in NodePrice.objects.order_by("node_kind", "pricing")
        ],
    }


def entries_of(copy: Mapping[str, Any] | None) -> list[Price] | None:
    """The prices of a run's copy; None when the run has none (made before prices were
    kept)."""
    if not copy or "entries" not in copy:
        return None
    fields = Price.__dataclass_fields__
    return [Price(**{k: e[k] for k in fields}) for e in copy.get("entries") or []]


def price_of(kinds: Iterable[str], capacity: str, table: Iterable[Price]) -> Price | None:
    """The price of a node with `kinds` (most specific first) and `capacity`
    ("preemptible" or "": not known) in `table`; None when no kind has a price."""
    table = list(table)
    for kind in kinds:
        found = {p.pricing: p for p in table if p.node_kind == kind}
        if len(found) == 1:
            return next(iter(found.values()))
        if found:
            wanted = (
                NodePrice.PREEMPTIBLE if capacity == NodePrice.PREEMPTIBLE else NodePrice.ON_DEMAND
            )
            return found.get(wanted)
    return None
