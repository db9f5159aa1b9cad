"""What a stored run cost: the ONE place a run's cost is computed.

cost = seconds × the hourly prices of the nodes the run used ÷ 3600, with the prices the
run copied from the price table when it was created (prices.py) and the nodes its launch
recorded (cluster/node_kinds.py). Two costs: to the target (the time to target on the
benchmark clock, DAWNBench's "cost to accuracy") and of the whole run (from its start to
its end, preparing the workers included: what the nodes were held for).

Why one function of the stored run (`of_run`, and `rate_of` for the statistics): the API,
the pages, the CLI and the results board show what it returns, and a run read on another
master (an imported one) costs the same there, because nothing here reads the live table.

A run that cannot be priced says why in words (`reason`), never $0: made before prices were
kept, an empty table when it was created, no record of its nodes, a node kind the table had
no price for, or prices in more than one currency.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from mlbench_master.api.models import Run, RunOrigin
from mlbench_master.cluster.node_kinds import RECORD_KEY
from mlbench_master.results import prices


class StoredRun(Protocol):
    """What of stored.py's StoredRun a cost needs (stored.py imports this module, so the
    type is named by its shape rather than imported)."""

    run: Run

    def time_to_target(self) -> float | None: ...


NOT_PRICED = "not priced"
SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True)
class Rate:
    """What an hour of a run's nodes cost, or why it cannot be said (`reason`)."""

    per_hour: float | None
    currency: str = ""
    nodes: list[dict[str, Any]] = field(default_factory=list)
    reason: str = ""

    @property
    def priced(self) -> bool:
        return self.per_hour is not None

    def cost(self, seconds: float | None) -> float | None:
        """The cost of `seconds` of the run's nodes; None when not priced or no time."""
        if self.per_hour is None or seconds is None:
            return None
        return float(seconds) * self.per_hour / SECONDS_PER_HOUR


def _not_priced(why: str) -> Rate:
    return Rate(per_hour=None, reason=f"{NOT_PRICED}: {why}")


def rate_of(run: Run) -> Rate:
    """The hourly price of the nodes `run` recorded, from its own copy of the table."""
    table = prices.entries_of(run.prices)
    if table is None:
        return _not_priced("the run was created before this master kept prices")
    if not table:
        return _not_priced("the price table was empty when the run was created")
    nodes = recorded_nodes(run)
    if not nodes:
        if run.state in (Run.QUEUED, Run.INITIALIZED):
            return _not_priced("its workers have not been launched yet")
        if nodes is None and _imported(run):
            return _not_priced(
                "it was imported from a bundle made before bundles carried a run's nodes "
                "(export it again from its origin to bring them)"
            )
        return _not_priced("the run recorded no nodes (its workers were never launched)")
    priced = []
    for node in nodes:
        kinds = list(node.get("kinds") or [])
        found = prices.price_of(kinds, str(node.get("capacity") or ""), table)
        if found is None:
            name = node.get("name") or "a node"
            return _not_priced(
                f"the price table had no price for {name} (kinds tried: "
                f"{', '.join(kinds) or 'none recorded'}) when the run was created"
            )
        priced.append(
            {
                "name": node.get("name") or "",
                "workers": int(node.get("workers") or 0),
                **found.record(),
            }
        )
    currencies = sorted({p["currency"] for p in priced})
    if len(currencies) > 1:
        return _not_priced(
            f"its nodes are priced in more than one currency ({', '.join(currencies)})"
        )
    total = sum(p["price_per_hour"] for p in priced)
    return Rate(per_hour=total, currency=currencies[0], nodes=priced)


def _imported(run: Run) -> bool:
    """Whether `run` came in a bundle: its origin where it was read with the run
    (select_related), else one query."""
    if "origin" in run._state.fields_cache:
        return run._state.fields_cache["origin"] is not None
    return RunOrigin.objects.filter(run_id=run.pk).exists()


def recorded_nodes(run: Run) -> list[dict[str, Any]] | None:
    """The nodes `run`'s launch recorded (cluster/node_kinds.py), [] for a record of none,
    None where the run holds no record at all. A bundle carries them (bundles/writer.py)
    so that an imported run costs what it cost at its origin."""
    record = run.job_metadata if isinstance(run.job_metadata, dict) else {}
    if RECORD_KEY not in record:
        return None
    nodes = record[RECORD_KEY]
    return list(nodes) if isinstance(nodes, list) else []


def run_seconds(run: Run) -> float | None:
    """How long the run held its nodes: start to end; None until it has ended (or when it
    never started)."""
    if run.state not in Run.FINAL_STATES or run.started_at is None or run.finished_at is None:
        return None
    return max(0.0, (run.finished_at - run.started_at).total_seconds())


def of_run(stored: StoredRun) -> dict[str, Any]:
    """A run's cost as the API shows it (`cost` of GET /api/runs/<id>/; docs/api.rst)."""
    run = stored.run
    rate = rate_of(run)
    taken = (run.prices or {}).get("taken_at")
    if not rate.priced:
        return {
            "priced": False,
            "reason": rate.reason,
            "currency": None,
            "per_hour": None,
            "nodes": [],
            "prices_taken_at": taken,
            "to_target": None,
            "whole_run": None,
            "notes": {},
        }
    ttt = stored.time_to_target()
    whole = run_seconds(run)
    notes = {}
    if ttt is None:
        notes["to_target"] = "the run did not reach its target"
    if whole is None:
        notes["whole_run"] = (
            "the run has not ended"
            if run.state not in Run.FINAL_STATES
            else "the run never started"
        )
    return {
        "priced": True,
        "reason": "",
        "currency": rate.currency,
        "per_hour": rate.per_hour,
        "nodes": rate.nodes,
        "prices_taken_at": taken,
        "to_target": None if ttt is None else {"seconds": ttt, "cost": rate.cost(ttt)},
        "whole_run": None if whole is None else {"seconds": whole, "cost": rate.cost(whole)},
        "notes": notes,
    }
