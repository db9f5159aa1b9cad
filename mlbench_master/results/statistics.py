"""The statistics of a run series: the ONE place where its numbers are computed.

The API (`GET /api/series/<id>/`), the series page and `mlbench report --series` all show
what `for_series` returns; nothing recomputes them elsewhere. The core (`summarize`) takes
plain data (`RunResult`s), so hand-computed cases test it without a database; `for_series`
reads the stored runs (stored.py; kept_runs.py keeps their results) and hands them to it.

How runs enter each statistic (docs/results.rst says the same for readers):

- Only runs in a final state count (`runs`); queued or running ones are `pending`, and a
  group with pending runs is not valid yet.
- Time to target: the runs that reached the target give the median, mean, standard
  deviation (sample, n-1), coefficient of variation (sd/mean), minimum and maximum. The
  olympic mean is MLPerf's: over ALL the group's runs, a run that did not reach the target
  (failed, cancelled, diverged, out of budget) counting as the slowest; the fastest and the
  slowest are dropped and the rest averaged. Two or more such runs make the group not
  valid (MLPerf allows one) and leave the olympic mean undefined (null), as MLPerf's
  result summarizer does.
- Accuracy after time, throughput and communication share: the FINISHED runs that
  measured them (a failed run stopped part-way: its numbers describe no full run); their
  olympic mean drops the lowest and the highest value.
- Speed-up of a run: the 1-worker group's median time to target over the run's time to
  target; efficiency: speed-up over the number of workers. Their STAT is over the runs
  that reached the target (null without a 1-worker median); `speedup_of_medians` is the
  ratio of the two medians.
- Cost (each run's own, results/cost.py): `cost_to_target` over the priced runs that
  reached the target (a run that missed it counts as the dearest in the olympic mean),
  `run_cost` over the priced runs in a final state (a failed run's nodes were paid for
  too); `price_per_hour` is the median of the group's priced runs' hourly prices, and
  `price_index` the original platform's: the group's price per hour over the 1-worker
  group's, divided by `speedup_of_medians` (1: as dear as one worker; 2: twice the money
  for the same result). Runs priced in more than one currency leave every cost null and
  `cost.reason` says why.

A STAT is {"n", "median", "mean", "sd", "cv", "min", "max", "olympic_mean"}, null where
undefined (no values; sd and cv need two values; the olympic mean needs a value left after
dropping two).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from mlbench_master.results import kept_runs, stored
from mlbench_master.results.run_result import FINAL_STATES, RunResult

__all__ = ["FINAL_STATES", "RunResult", "describe", "for_series", "olympic_mean", "summarize"]

# At most this many runs of a group may miss the target for its result to be valid (MLPerf
# Training's rule for every benchmark but one; the olympic mean drops one slowest run).
MAX_NOT_REACHED = 1
BAND_POINTS = 200  # the most points a band has; longer ones are thinned evenly


def olympic_mean(values: Sequence[float], not_reached: int = 0) -> float | None:
    """MLPerf's olympic mean: sort, drop the fastest and the slowest, average the rest.

    `not_reached` runs count as slower than every value, so with one of them only the
    fastest value is dropped; with more than MAX_NOT_REACHED there is no score (None), as in
    mlperf_logging's result summarizer (`_compute_olympic_average`), whose slicing this
    follows so the two agree on every input.
    """
    if not_reached > MAX_NOT_REACHED:
        return None
    ordered = sorted(values)
    kept = ordered[MAX_NOT_REACHED : len(ordered) - (MAX_NOT_REACHED - not_reached)]
    return statistics.fmean(kept) if kept else None


def describe(values: Iterable[float], not_reached: int = 0) -> dict[str, Any]:
    """The STAT of `values` (see the module docstring); `not_reached` only enters the
    olympic mean, as runs slower than any value."""
    xs = [float(v) for v in values]
    n = len(xs)
    if n == 0:
        empty = dict.fromkeys(("median", "mean", "sd", "cv", "min", "max", "olympic_mean"))
        return {"n": 0, **empty}
    mean = statistics.fmean(xs)
    sd = statistics.stdev(xs) if n >= 2 else None
    return {
        "n": n,
        "median": statistics.median(xs),
        "mean": mean,
        "sd": sd,
        "cv": sd / mean if sd is not None and mean != 0 else None,
        "min": min(xs),
        "max": max(xs),
        "olympic_mean": olympic_mean(xs, not_reached),
    }


def _validity(runs: int, pending: int, not_reached: int) -> tuple[bool, str]:
    if pending:
        return False, f"{pending} run{'' if pending == 1 else 's'} not finished yet"
    if runs == 0:
        return False, "no run has finished"
    if not_reached > MAX_NOT_REACHED:
        return False, (
            f"{not_reached} of {runs} runs did not reach the target; MLPerf allows "
            f"{MAX_NOT_REACHED}"
        )
    return True, ""


def _cost_of(r: RunResult, seconds: float | None) -> float | None:
    if r.price_per_hour is None or seconds is None:
        return None
    return seconds * r.price_per_hour / 3600.0


def _costs(
    workers: int, members: list[RunResult], of_medians: float | None, base_rate: float | None
) -> dict[str, Any]:
    """The group's cost statistics (see the module docstring); plain data, no currency:
    `cost_block` says which one, and makes them null where currencies are mixed."""
    final = [r for r in members if r.final]
    priced = [r for r in final if r.price_per_hour is not None]
    rate = statistics.median([r.price_per_hour for r in priced]) if priced else None
    to_target = [_cost_of(r, r.time_to_target) for r in priced if r.reached]
    whole = [_cost_of(r, r.run_seconds) for r in priced if r.run_seconds is not None]
    index = None
    if workers == 1 and rate is not None:
        index = 1.0
    elif rate is not None and base_rate and of_medians:
        index = (rate / base_rate) / of_medians
    return {
        "price_per_hour": rate,
        "cost_to_target": describe(to_target, len([r for r in priced if not r.reached])),
        "run_cost": describe(whole),
        "price_index": index,
    }


def cost_block(results: Sequence[RunResult]) -> dict[str, Any]:
    """The series' currency and the runs that are not priced, with why."""
    final = [r for r in results if r.final]
    currencies = sorted({r.currency for r in final if r.price_per_hour is not None})
    missing = [{"run": r.run, "reason": r.not_priced} for r in final if r.price_per_hour is None]
    reason = ""
    if len(currencies) > 1:
        reason = (
            f"not priced: its runs are priced in more than one currency ({', '.join(currencies)})"
        )
    elif not currencies:
        reason = missing[0]["reason"] if missing else "not priced: no run has ended yet"
    return {
        "currency": currencies[0] if len(currencies) == 1 else None,
        "priced": len(final) - len(missing),
        "not_priced": missing,
        "reason": reason,
    }


def _group(workers: int, members: list[RunResult], baseline: float | None) -> dict[str, Any]:
    final = [r for r in members if r.final]
    finished = [r for r in final if r.state == "FINISHED"]
    times = [r.time_to_target for r in final if r.reached]
    not_reached = len(final) - len(times)
    valid, reason = _validity(len(final), len(members) - len(final), not_reached)
    speedup = efficiency = None
    of_medians = None
    if baseline is not None and times:
        ratios = [baseline / t for t in times]
        speedup = describe(ratios)
        efficiency = describe(r / workers for r in ratios)
        of_medians = baseline / statistics.median(times)
    return {
        "num_workers": workers,
        "runs": len(final),
        "pending": len(members) - len(final),
        "reached": len(times),
        "valid": valid,
        "invalid_reason": reason,
        "time_to_target": describe(times, not_reached),
        "accuracy_after_time": describe(
            r.accuracy_after_time for r in finished if r.accuracy_after_time is not None
        ),
        "images_per_second": describe(r.throughput for r in finished if r.throughput is not None),
        "communication_share": describe(
            r.communication_share for r in finished if r.communication_share is not None
        ),
        "speedup": speedup,
        "efficiency": efficiency,
        "speedup_of_medians": of_medians,
    }


def _with_costs(groups: list[dict], by_count: dict[int, list[RunResult]], mixed: bool) -> None:
    """Each group's cost statistics, next to its other numbers (null where `mixed`)."""
    ones = [
        r.price_per_hour for r in by_count.get(1, []) if r.final and r.price_per_hour is not None
    ]
    base_rate = statistics.median(ones) if ones else None
    for g in groups:
        costs = _costs(
            g["num_workers"], by_count[g["num_workers"]], g["speedup_of_medians"], base_rate
        )
        if mixed:
            costs = {"price_per_hour": None, "cost_to_target": describe([]),
                     "run_cost": describe([]), "price_index": None}  # fmt: skip
        g.update(costs)


def band(curves: Sequence[Sequence[tuple[float, float]]]) -> list[list[float]]:
    """[[seconds, low, median, high], ...] over a group's accuracy curves.

    Runs evaluate at different moments, so at each moment any run evaluated, every run
    that has evaluated by then contributes its latest accuracy (a run that stopped keeps
    its last one: what it had reached by that time); low and high are the least and the
    greatest of those, median their median.
    """
    grid = sorted({t for c in curves for t, _ in c})
    if len(grid) > BAND_POINTS:
        step = (len(grid) - 1) / (BAND_POINTS - 1)
        grid = [grid[round(i * step)] for i in range(BAND_POINTS)]
    out = []
    for t in grid:
        latest = [c_at for c in curves if (c_at := _value_at(c, t)) is not None]
        if latest:
            out.append([t, min(latest), statistics.median(latest), max(latest)])
    return out


def _value_at(curve: Sequence[tuple[float, float]], t: float) -> float | None:
    value = None
    for seconds, accuracy in curve:
        if seconds > t:
            break
        value = accuracy
    return value


def summarize(results: Sequence[RunResult], target: dict[str, Any]) -> dict[str, Any]:
    """The series statistics of `results` (plain data in, JSON-ready dict out)."""
    counts = sorted({r.num_workers for r in results})
    by_count = {k: [r for r in results if r.num_workers == k] for k in counts}
    ones = [r.time_to_target for r in by_count.get(1, []) if r.reached]
    baseline = statistics.median(ones) if ones else None
    groups = [_group(k, by_count[k], baseline) for k in counts]
    cost = cost_block(results)
    _with_costs(groups, by_count, mixed=cost["currency"] is None and cost["priced"] > 0)
    return {
        "target": target,
        "baseline": {"num_workers": 1, "median_time_to_target": baseline},
        "groups": groups,
        "cost": cost,
        "curves": [
            {
                "run": r.run,
                "seed": r.seed,
                "num_workers": r.num_workers,
                "state": r.state,
                "reached": r.reached,
                "time_to_target": r.time_to_target,
                "points": [[t, a] for t, a in r.curve],
                "time_split": dict(r.time_split),
                "price_per_hour": r.price_per_hour,
                "cost_to_target": _cost_of(r, r.time_to_target),
                "run_cost": _cost_of(r, r.run_seconds),
            }
            for r in sorted(results, key=lambda r: (r.num_workers, r.seed, r.run))
        ],
        "bands": [
            {"num_workers": k, "points": band([r.curve for r in by_count[k] if r.curve])}
            for k in counts
        ],
    }


def for_series(series: Any) -> dict[str, Any]:
    """The statistics of a stored `Series` (an `api.models.Series`), from its runs' stored
    summaries and metrics."""
    results = kept_runs.results_of(series.runs.all())
    return summarize(results, stored.target_of(series))
