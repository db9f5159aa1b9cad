"""`mlbench prices list|set|set-local`: the master's price table from the command line, and
the one way a line is sent to it (`set_price`, also what `mlbench cluster create` uses for
a new cluster's machines).

Why a line is changed in place rather than added again: the table keeps one price per
node kind and pricing (the master answers 400 to a second), and a resumed create or a
corrected price must replace the old one, not fail.
"""

from __future__ import annotations

import argparse
from typing import Any

from mlbench_worker.client.cli.formatting import table
from mlbench_worker.client.cli.master import EXIT_OK, EXIT_USAGE, CliError, Master
from mlbench_worker.client.clusters import prices


def add_parser(sub: Any) -> None:
    price = sub.add_parser("prices", help="the master's price table: list, set, set-local")
    pverbs = price.add_subparsers(dest="verb", metavar="VERB")
    pverbs.required = True
    pverbs.add_parser("list", help="the lines runs are priced by")
    one = pverbs.add_parser("set", help="what an hour of a kind of node costs (staff)")
    one.add_argument("node_kind", help="a machine type (n1-standard-4), a node name, local, ...")
    one.add_argument("price_per_hour", type=float)
    one.add_argument("--source", required=True, help="where the price comes from")
    one.add_argument("--as-of", required=True, help="the source's date, YYYY-MM-DD")
    one.add_argument("--currency", default="USD")
    one.add_argument("--preemptible", action="store_true", help="the spot/preemptible price")
    local = pverbs.add_parser(
        "set-local", help="price this machine (local runs) as a cloud machine type (staff)"
    )
    local.add_argument("provider", choices=("gcloud", "aws"))
    local.add_argument("machine_type", help="e.g. e2-standard-4 or m5.xlarge")


def set_price(master: Master, line: dict[str, Any]) -> dict[str, Any]:
    """Add the line to the master's price table, or change the one of the same node kind
    and pricing: what the master stored."""
    table_now = master.json("_submit", "GET", "prices/") or []
    rows = table_now.get("results", table_now) if isinstance(table_now, dict) else table_now
    same = [
        r for r in rows if (r["node_kind"], r["pricing"]) == (line["node_kind"], line["pricing"])
    ]
    if same:
        return master.json("_submit", "PUT", f"prices/{same[0]['id']}/", json=line)
    return master.json("_submit", "POST", "prices/", json=line)


def cmd_prices(args: argparse.Namespace, master: Any) -> int:
    """`master`: the Master, or a function that makes it (so that a bad machine type is
    refused before a master is looked for)."""
    line: dict[str, Any] | None = None
    if args.verb == "set-local":
        try:
            line = prices.local_line(args.provider, args.machine_type)
        except KeyError as exc:
            raise CliError(str(exc.args[0]), EXIT_USAGE) from None
    master = master() if callable(master) else master
    if args.verb == "list":
        rows = master.json("_submit", "GET", "prices/") or []
        print(table(["NODE KIND", "PRICING", "PER HOUR", "AS OF", "SOURCE"],
                    [[r["node_kind"], r["pricing"], f"{r['price_per_hour']} {r['currency']}",
                      r["as_of"], r["source"]] for r in rows]))  # fmt: skip
        return EXIT_OK
    if args.verb == "set":
        line = {
            "node_kind": args.node_kind, "price_per_hour": args.price_per_hour,
            "pricing": prices.PREEMPTIBLE if args.preemptible else prices.ON_DEMAND,
            "currency": args.currency, "source": args.source, "as_of": args.as_of,
        }  # fmt: skip
    assert line is not None
    stored = set_price(master, line)
    print(
        f"{stored['node_kind']} ({stored['pricing']}): {stored['price_per_hour']} "
        f"{stored['currency']} an hour, from {stored['source']} (as of {stored['as_of']}); "
        "runs created from now on are priced by it"
    )
    return EXIT_OK
