"""An algorithm study's score, as MLCommons AlgoPerf defines it: per-seed times to target
become per-cell medians, each workload's times become ratios to the best algorithm there,
the ratios become a performance profile, and its normalised area is the score.

Why AlgoPerf's rule (Dahl et al. 2023, "Benchmarking Neural Network Training Algorithms",
arXiv 2306.07179; their scoring code, scoring/performance_profile.py of
mlcommons/algorithmic-efficiency): it rewards an algorithm for being near the best on many
workloads rather than far ahead on one, it needs no per-workload weights, and a miss
simply removes a workload from an algorithm's profile. What we take from it and what we do
differently is stated in docs/studies.rst; in short:

- a cell (algorithm, workload, condition) is the median over its seeds of the time to
  target, a miss counted as infinite (an even count: the mean of the two middle values,
  infinite when either is: numpy's median, which AlgoPerf's code uses);
- a held-out variant gates a workload: an algorithm whose variant time is infinite or more
  than TAU_MAX times the best variant time counts as infinite on that workload in every
  condition (AlgoPerf v0.5), applied before the best of the workload is found;
- per condition, r = t / t_best per workload, rho(tau) = share of workloads with r <= tau,
  and the score is the exact area under that step function from 1 to TAU_MAX divided by
  TAU_MAX - 1, which equals mean over workloads of max(0, TAU_MAX - r) / (TAU_MAX - 1)
  (AlgoPerf integrates 100 sampled points with the trapezoid rule; the exact area is
  what that approximates, with no sampling error);
- the overall score is the mean of the per-condition scores (each condition weighs the same).

Pure Python, no Django: the study model and API call it with outcomes read from stored
runs (results/stored.py: time_to_target from the evaluator's grades where it graded), and
the tests call it with hand-made ones.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

TAU_MAX = 4.0
INF = math.inf

Cell = tuple[str, str, str]  # (algorithm, workload, condition)


@dataclass(frozen=True)
class Outcome:
    """One seed's run of a cell: time, bytes and epochs to target; None where it missed the
    target within its budget (or did not count bytes)."""

    seconds: float | None
    bytes: float | None = None  # bytes one rank sent until the target (comm_bytes x steps)
    epochs: float | None = None

    @property
    def time(self) -> float:
        """Seconds to target; infinite for a miss, so a median and a ratio can order it."""
        return INF if self.seconds is None else float(self.seconds)


def median(values: Sequence[float]) -> float:
    """The median with infinities: the middle value, or for an even count the mean of the
    two middle values, which is infinite when either is (so 2 misses of 4 seeds make the
    cell a miss, 1 of 4 does not). ValueError for no values: a cell must have seeds."""
    if not values:
        raise ValueError("a median of no seeds: every cell needs at least one outcome")
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    low, high = ordered[mid - 1], ordered[mid]
    return INF if math.isinf(low) or math.isinf(high) else (low + high) / 2


def _to_target(values: Sequence[float | None]) -> float:
    return median([INF if v is None else float(v) for v in values])


@dataclass(frozen=True)
class CellMedian:
    """A cell's medians over its seeds; infinite where the median is a miss."""

    seconds: float
    bytes: float
    epochs: float
    seeds: int
    reached: int  # seeds that reached the target


def summarize(outcomes: Sequence[Outcome]) -> CellMedian:
    """The cell's medians: time, bytes and epochs to target, each a miss counted infinite."""
    return CellMedian(
        seconds=median([o.time for o in outcomes]),
        bytes=_to_target([o.bytes if o.seconds is not None else None for o in outcomes]),
        epochs=_to_target([o.epochs if o.seconds is not None else None for o in outcomes]),
        seeds=len(outcomes),
        reached=sum(o.seconds is not None for o in outcomes),
    )


def ratios(times: Mapping[str, float]) -> dict[str, float]:
    """r = t / t_best for each algorithm on one workload. No finite time (all missed): no
    best, every r infinite, so every algorithm scores 0 there. A tie shares r = 1."""
    finite = [t for t in times.values() if math.isfinite(t)]
    if not finite:
        return dict.fromkeys(times, INF)
    best = min(finite)
    if best <= 0:
        raise ValueError(f"a time to target must be positive, not {best!r}")
    return {a: t / best for a, t in times.items()}


def profile(rs: Sequence[float], tau: float) -> float:
    """rho(tau): the share of workloads whose ratio is at most tau."""
    return sum(r <= tau for r in rs) / len(rs)


def profile_steps(rs: Sequence[float], tau_max: float = TAU_MAX) -> list[tuple[float, float]]:
    """rho as a step function on [1, tau_max]: (tau, rho from tau on) at 1 and at every
    ratio inside, in order (what a page draws; rho is right-continuous)."""
    taus = sorted({1.0, *(r for r in rs if 1.0 < r <= tau_max)})
    return [(t, profile(rs, t)) for t in taus]


def profile_area(rs: Sequence[float], tau_max: float = TAU_MAX) -> float:
    """The score of one condition: the exact area under rho from 1 to tau_max, divided by
    tau_max - 1, summed interval by interval over the step function's pieces."""
    steps = profile_steps(rs, tau_max)
    edges = [t for t, _ in steps] + [tau_max]
    area = sum(rho * (edges[i + 1] - edges[i]) for i, (_, rho) in enumerate(steps))
    return area / (tau_max - 1)


@dataclass(frozen=True)
class StudyScore:
    """Everything a study page shows, computed once."""

    algorithms: tuple[str, ...]
    workloads: tuple[str, ...]
    conditions: tuple[str, ...]
    medians: dict[Cell, CellMedian]
    held_out_passed: dict[tuple[str, str], bool]  # (algorithm, workload); empty: no gate
    times: dict[Cell, float]  # the median time after the held-out gate
    ratios: dict[Cell, float]
    by_condition: dict[str, dict[str, float]]  # condition -> algorithm -> score
    overall: dict[str, float]  # algorithm -> mean of its per-condition scores
    tau_max: float

    def profile(self, algorithm: str, condition: str) -> list[tuple[float, float]]:
        """The algorithm's performance profile in `condition`, as steps (profile_steps)."""
        return profile_steps(
            [self.ratios[(algorithm, w, condition)] for w in self.workloads], self.tau_max
        )


def _grid(cells: Mapping[Cell, Sequence[Outcome]]) -> tuple[tuple[str, ...], ...]:
    algorithms, workloads, conditions = (
        tuple(dict.fromkeys(key[i] for key in cells)) for i in range(3)
    )
    missing = [
        (a, w, c)
        for a in algorithms
        for w in workloads
        for c in conditions
        if (a, w, c) not in cells or not cells[(a, w, c)]
    ]
    if missing:  # a missing cell is neither a miss nor a skip: refuse to guess
        shown = ", ".join("/".join(m) for m in missing[:5])
        raise ValueError(f"cells without outcomes: {shown}{' ...' if len(missing) > 5 else ''}")
    return algorithms, workloads, conditions


def held_out_gate(
    variants: Mapping[tuple[str, str], Sequence[Outcome]], tau_max: float = TAU_MAX
) -> dict[tuple[str, str], bool]:
    """(algorithm, workload) -> whether the algorithm passes the workload's held-out
    variant: its median variant time is finite and at most tau_max times the best
    algorithm's there. Nobody reaching the variant: nobody passes."""
    passed: dict[tuple[str, str], bool] = {}
    for workload in dict.fromkeys(w for _, w in variants):
        times = {
            a: median([o.time for o in out]) for (a, w), out in variants.items() if w == workload
        }
        rs = ratios(times)
        passed.update({(a, workload): r <= tau_max for a, r in rs.items()})
    return passed


def score_study(
    cells: Mapping[Cell, Sequence[Outcome]],
    held_out: Mapping[tuple[str, str], Sequence[Outcome]] | None = None,
    tau_max: float = TAU_MAX,
) -> StudyScore:
    """Score a study. `cells`: (algorithm, workload, condition) -> per-seed outcomes, the
    full grid; `held_out`: (algorithm, workload) -> the variant's per-seed outcomes, for
    every algorithm and workload of the grid, or None to score without the gate (then
    say so wherever the score is shown). ValueError names any missing cell."""
    if tau_max <= 1:
        raise ValueError(f"tau_max must be above 1, not {tau_max!r}")
    algorithms, workloads, conditions = _grid(cells)
    passed: dict[tuple[str, str], bool] = {}
    if held_out is not None:
        lacking = [f"{a}/{w}" for a in algorithms for w in workloads if not held_out.get((a, w))]
        if lacking:
            raise ValueError(f"held-out variants without outcomes: {', '.join(lacking)}")
        passed = held_out_gate({k: held_out[k] for k in held_out if k[1] in workloads}, tau_max)
    medians = {key: summarize(cells[key]) for key in cells}
    times = {
        key: (m.seconds if passed.get((key[0], key[1]), True) else INF)
        for key, m in medians.items()
    }
    all_ratios: dict[Cell, float] = {}
    for w in workloads:
        for c in conditions:
            rs = ratios({a: times[(a, w, c)] for a in algorithms})
            all_ratios.update({(a, w, c): r for a, r in rs.items()})
    by_condition = {
        c: {
            a: profile_area([all_ratios[(a, w, c)] for w in workloads], tau_max) for a in algorithms
        }
        for c in conditions
    }
    overall = {a: sum(by_condition[c][a] for c in conditions) / len(conditions) for a in algorithms}
    return StudyScore(
        algorithms, workloads, conditions, medians, passed, times, all_ratios, by_condition,
        overall, tau_max,
    )  # fmt: skip
