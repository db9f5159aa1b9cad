"""What runs and series cost, as the commands print it: `mlbench show` (a line),
`mlbench report` (a column and notes) and `mlbench report --series` (columns).

The numbers are the master's (a run's `cost`, a series' `statistics`: computed by
mlbench_master/results/cost.py and statistics.py); this module only words them. A run
the master could not price says "not priced" with the master's reason, never 0.
"""

from __future__ import annotations

from typing import Any

from mlbench_worker.client.cli.formatting import duration

NOT_PRICED = "not priced"


def money(value: float | None, currency: str | None) -> str:
    """0.00383 USD, 12.50 USD: cents where there are any, three figures below one unit
    (a short run costs fractions of a cent); "-" when there is no amount."""
    if value is None:
        return "-"
    amount = f"{value:.2f}" if abs(value) >= 1 else f"{value:.3g}"
    return f"{amount} {currency or ''}".rstrip()


def cost_cell(run: dict) -> str:
    """The report's COST column: "to target / whole run", or "not priced"."""
    cost = run.get("cost") or {}
    if not cost.get("priced"):
        return NOT_PRICED
    currency = cost.get("currency")
    to_target = (cost.get("to_target") or {}).get("cost")
    whole = (cost.get("whole_run") or {}).get("cost")
    return f"{money(to_target, None)} / {money(whole, currency)}"


def cost_to_target(run: dict) -> str:
    """The report's COST TO TARGET cell in the default view: "0.0111 USD", "-" where the
    target was not reached, or "not priced"."""
    cost = run.get("cost") or {}
    if not cost.get("priced"):
        return NOT_PRICED
    return money((cost.get("to_target") or {}).get("cost"), cost.get("currency"))


def cost_notes(run: dict) -> list[str]:
    """Why a run has no cost (the master's words), for under the report's table."""
    cost = run.get("cost") or {}
    if cost.get("priced") or not cost:
        return []
    return [f"cost of run {run['id']}: {cost.get('reason') or NOT_PRICED}"]


def cost_line(run: dict) -> str:
    """`mlbench show`'s cost line: both costs with the hourly price and the nodes, or the
    reason it has none."""
    cost = run.get("cost") or {}
    if not cost:
        return NOT_PRICED
    if not cost.get("priced"):
        return cost.get("reason") or NOT_PRICED
    currency = cost.get("currency")
    parts = []
    for key, words in (("to_target", "to target"), ("whole_run", "whole run")):
        part = cost.get(key)
        if part is None:
            parts.append(f"{words}: - ({(cost.get('notes') or {}).get(key, 'no time')})")
        else:
            parts.append(f"{words} {money(part['cost'], currency)} ({duration(part['seconds'])})")
    nodes = ", ".join(
        f"{n.get('name') or 'a node'} as {n['node_kind']} {money(n['price_per_hour'], currency)}/h"
        for n in cost.get("nodes") or []
    )
    return f"{'; '.join(parts)}; at {money(cost.get('per_hour'), currency)}/h: {nodes}"


def series_cost(group: dict[str, Any], currency: str | None) -> list[str]:
    """A series table's COST TO TARGET and PRICE INDEX cells of one worker count."""
    stat = group.get("cost_to_target") or {}
    cost = money(stat.get("median"), currency) if stat.get("n") else "-"
    index = group.get("price_index")
    return [cost, "-" if index is None else f"{index:.2f}"]


def series_cost_note(stats: dict[str, Any]) -> list[str]:
    """Under a series table: why it has no cost, or which of its runs are not priced."""
    block = stats.get("cost") or {}
    if block.get("reason"):
        return [f"cost: {block['reason']}"]
    return [f"cost of run {m['run']}: {m['reason']}" for m in block.get("not_priced") or []]
