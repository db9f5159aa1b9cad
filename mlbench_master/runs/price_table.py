"""The one writer of the price table (NodePrice): the API's price endpoints and the
`mlbench_prices` command parse a line (api/prices.py's serializer) and store it here.

Why here: every write of a row lives under runs/ (tests/test_write_owners.py); a run copies
the table when it is created (results/prices.py), so a change here reaches only the runs
created after it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import transaction

from mlbench_master.api.models import NodePrice


def add(fields: dict[str, Any]) -> NodePrice:
    """Store a new line (its fields parsed and checked by the caller)."""
    return change(NodePrice(), fields)


def change(row: NodePrice, fields: dict[str, Any]) -> NodePrice:
    """Change the parsed `fields` of a line (a new one is stored), each named: a line has
    no other fields."""
    row.node_kind = fields.get("node_kind", row.node_kind)
    row.pricing = fields.get("pricing", row.pricing)
    row.price_per_hour = fields.get("price_per_hour", row.price_per_hour)
    row.currency = fields.get("currency", row.currency)
    row.source = fields.get("source", row.source)
    row.as_of = fields.get("as_of", row.as_of)
    row.save()
    return row


def remove(row: NodePrice) -> None:
    row.delete()


def replace_all(lines: Iterable[dict[str, Any]]) -> int:
    """The table replaced by `lines` (parsed) in one transaction; how many it now has."""
    with transaction.atomic():
        NodePrice.objects.all().delete()
        return len([add(line) for line in lines])
