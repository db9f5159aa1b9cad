"""The timed loop: every size, op and backend in turn, warmed up, repeated, bounded in time.

Order: size by size, and within a size every op and backend, so a sweep stopped by its time
budget has measured every backend up to the same size and its curves end together.

Every iteration (warm-up or timed) starts with a tiny MPI all-reduce of two flags: "I want
another repeat" and "the time budget is not spent". It is a barrier (no rank leaves it
before all have entered), so the timed collective starts aligned on every rank, and it is
the agreement itself: each rank decides with its own clock, the minimum wins, so all ranks
always run the same number of collectives and none waits for a partner that stopped. The
repeat's time is the slowest rank's (one MPI max over the repeats' times per cell): a
collective is done when every rank has the message.

Bounds: a cell (op, backend, size) warms up for at most a quarter of --size-time-cap and
stops repeating once the cap is spent and --min-repeats are timed (the row says "capped");
the time budget stops the sweep between two iterations, keeps a cell with at least one timed
repeat and lists the cells it never reached.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from mlbench_worker.backend_benchmark import stats
from mlbench_worker.backend_benchmark.collectives import Backend

WARMUP_SHARE = 0.25  # of the cap, at most, spent warming a cell up


@dataclass(frozen=True)
class Plan:
    sizes: list[int]
    ops: list[str]
    backends: list[str]
    warmup: int
    repeats: int
    min_repeats: int
    size_time_cap: float
    time_budget: float | None = None


@dataclass
class Outcome:
    rows: list[dict] = field(default_factory=list)
    not_measured: list[dict] = field(default_factory=list)  # {op, backend, size}
    budget_spent: bool = False
    elapsed: float = 0.0

    @property
    def stop_reason(self) -> str:
        if not self.budget_spent:
            return "sweep complete"
        return f"time budget spent: {len(self.not_measured)} (op, backend, size) cells not measured"


class _Clock:
    """The sweep's clock and the per-iteration agreement between ranks."""

    def __init__(self, world: object, budget: float | None) -> None:
        from mpi4py import MPI

        self.world, self.MPI = world, MPI
        self.budget = budget
        self.start = time.perf_counter()
        self._flags = np.zeros(2, dtype=np.int32)

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def agree(self, want_more: bool) -> tuple[bool, bool]:
        """(every rank wants another iteration, no rank has spent the budget)."""
        within = self.budget is None or self.elapsed() < self.budget
        self._flags[:] = (want_more, within)
        self.world.Allreduce(self.MPI.IN_PLACE, self._flags, op=self.MPI.MIN)
        return bool(self._flags[0]), bool(self._flags[1])

    def slowest(self, times: list[float]) -> list[float]:
        """Each repeat's time on the slowest rank."""
        arr = np.asarray(times, dtype=np.float64)
        self.world.Allreduce(self.MPI.IN_PLACE, arr, op=self.MPI.MAX)
        return arr.tolist()


def run_sweep(
    plan: Plan,
    world: object,
    backends: dict[str, Backend],
    on_row: Callable[[dict, float], None] = lambda row, elapsed: None,
) -> Outcome:
    """Measure every cell of `plan`; `on_row(row, elapsed)` gets each row as it is done."""
    clock = _Clock(world, plan.time_budget)
    workers = world.Get_size()
    out = Outcome()
    for size in plan.sizes:
        for op in plan.ops:
            for name in plan.backends:
                cell = {"op": op, "backend": name, "size": size}
                if out.budget_spent:
                    out.not_measured.append(cell)
                    continue
                row = _measure(plan, clock, backends[name], op, size, workers)
                if row is None:
                    out.budget_spent = True
                    out.not_measured.append(cell)
                    continue
                out.budget_spent = row.pop("budget_spent")
                out.rows.append(row)
                on_row(row, clock.elapsed())
    out.elapsed = clock.elapsed()
    return out


def _measure(
    plan: Plan, clock: _Clock, backend: Backend, op: str, size: int, workers: int
) -> dict | None:
    """One cell's row (with "budget_spent"), or None when the budget ran out before a repeat."""
    message = backend.message(size)
    started = time.perf_counter()
    warm_cap = plan.size_time_cap * WARMUP_SHARE
    warmed = 0
    while True:
        spent = time.perf_counter() - started
        more, within = clock.agree(
            warmed < max(1, plan.warmup) and (warmed == 0 or spent < warm_cap)
        )
        if not within:
            return None
        if not more:
            break
        backend.run(op, message)
        warmed += 1
    times: list[float] = []
    budget_spent = False
    while True:
        spent = time.perf_counter() - started
        want = len(times) < plan.repeats and (
            len(times) < plan.min_repeats or spent < plan.size_time_cap
        )
        more, within = clock.agree(want)
        if not within:
            budget_spent = True
            break
        if not more:
            break
        t0 = time.perf_counter()
        backend.run(op, message)
        times.append(time.perf_counter() - t0)
    if not times:
        return None
    row = stats.summarize(
        op,
        backend.name,
        size,
        workers,
        clock.slowest(times),
        warmup=warmed,
        capped=len(times) < plan.repeats,
    )
    row["budget_spent"] = budget_spent
    return row
