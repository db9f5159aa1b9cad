"""`python manage.py mlbench_prices [--load FILE|-]`: print the price table as JSON, or
replace it with the lines of a JSON file (a list of what POST /api/prices/ takes).

Why: an operator who keeps prices under version control (beside the chart's values, a
cluster's inventory) loads them in one step, also where no browser reaches the master
(`kubectl exec -i ... -- python manage.py mlbench_prices --load - < prices.json`). Every
line is checked by the API's own rules first; one bad line names its index and field and
nothing is written. As with the API, only runs created afterwards copy the new table.
"""

from __future__ import annotations

import json
import sys
from decimal import Decimal

from django.core.management.base import BaseCommand, CommandError, CommandParser

from mlbench_master.api.models import NodePrice
from mlbench_master.api.prices import NodePriceSerializer
from mlbench_master.runs import price_table


def _plain(value: object) -> object:
    """A price as the API writes it (a number), a date as text."""
    return float(value) if isinstance(value, Decimal) else str(value)


class Command(BaseCommand):
    help = "Print the price table as JSON, or replace it with a JSON file's lines (--load)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--load",
            metavar="FILE",
            help="a JSON list of prices (node_kind, price_per_hour, currency, source, as_of, "
            "pricing) that replaces the table; - reads standard input; [] empties it",
        )

    def handle(self, *args: object, **options: object) -> None:
        path = options.get("load")
        if path:
            self._load(str(path))
        rows = NodePriceSerializer(NodePrice.objects.all(), many=True).data
        self.stdout.write(json.dumps(rows, indent=2, default=_plain))

    def _load(self, path: str) -> None:
        try:
            text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
            lines = json.loads(text)
        except (OSError, ValueError) as exc:
            raise CommandError(f"--load {path}: not a readable JSON file ({exc})") from exc
        if not isinstance(lines, list):
            raise CommandError(f"--load {path}: give a JSON list of prices, e.g. [{{...}}]")
        parsed_lines, seen = [], {}
        for i, line in enumerate(lines):
            parsed = NodePriceSerializer(data=line, context={"replacing": True})
            if not parsed.is_valid():
                problems = "; ".join(
                    f"{field}: {' '.join(map(str, msgs))}" for field, msgs in parsed.errors.items()
                )
                raise CommandError(f"--load {path}: line [{i}]: {problems}; nothing changed")
            kind = parsed.validated_data["node_kind"]
            pricing = parsed.validated_data.get("pricing", NodePrice.ON_DEMAND)
            if (kind, pricing) in seen:
                raise CommandError(
                    f"--load {path}: line [{i}]: node_kind: {kind!r} already has a {pricing} "
                    f"price (line [{seen[kind, pricing]}]); nothing changed"
                )
            seen[kind, pricing] = i
            parsed_lines.append(parsed.validated_data)
        price_table.replace_all(parsed_lines)
        self.stderr.write(f"the price table now has {len(lines)} line(s)")
