# Over 400 lines: the check, what it is made of and the search for its reference are one rule.
"""Closed-division runs checked against the reference's convergence, as MLPerf Training
checks a submission against its reference convergence points (RCPs): a result that reaches
the target in fewer epochs than the reference implementation's runs allow is flagged
(docs/checking.rst, "Convergence against the reference").

Why: the closed division promises the same model, data and recipe as the reference, so a
result that converges in clearly fewer epochs either trained something else or was graded
on something else; by the clock alone it would just look fast.

The arithmetic is mlperf_logging's own (`rcp_checker.RCP_Checker`), called, not copied: its
constructor derives the RCP mean (the olympic mean of the reference runs' epochs to
target), stdev and "min epochs" (the smallest mean a one-sided t-test at alpha 0.05 still
accepts) from the reference epochs we hand it as an RCP file; `_eval_submission_record`
takes the olympic mean of the checked runs' epochs and compares it with that bound. The
rule is MLPerf's for ResNet (`BENCHMARK`): 5 runs a result, the reference twice as many.

The reference of a series group (one series, one worker count): the group of a series of
the reference implementation in the closed division, on the same task, goal, algorithm,
learning-rate schedule, data set and global batch size, whose runs all ended, were all
graded by the evaluator and come from this installation or a trusted, undisputed origin;
of several, the one with the most runs that reached the target (then the earliest series).
Epochs to target are the epoch of the evaluator's first grade that meets the goal
(`stored.StoredRun.reaching_evaluation`), never what a run reports.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import logging
import statistics
import tempfile
import threading
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import F, Q

from mlbench_master.api.models import Run
from mlbench_master.bundles import origins, signing
from mlbench_master.results import kept_runs, standing
from mlbench_worker.shared import result
from mlbench_worker.shared.implementation_catalogue import DEFAULT_IMPLEMENTATION

BENCHMARK = "resnet"  # whose MLPerf rule every task is held to (task 1b is MLPerf's resnet)
RULESET = "4.0.0"  # the ruleset the MLPerf logs are checked with (docs/checking.rst)
USAGE = "training"
# The runs a checked result needs: rcp_checker.submission_runs[USAGE][BENCHMARK], written
# out because rcp_checker is imported only when a check runs (it imports SciPy, 1.25 s of
# every master process's start); tests/results/test_convergence.py holds the two equal.
RUNS = 5
REFERENCE_RUNS = 2 * RUNS  # "References need 2x of these runs" (rcp_checker's comment)
MAX_NOT_CONVERGED = 1  # more, and rcp_checker's reading says "Insufficient convergence"
NOT_CONVERGED = 1e9  # the epochs rcp_checker gives a run that did not converge
REFERENCE = DEFAULT_IMPLEMENTATION  # the implementation whose series are references
FLAGGED, PASSED, IS_REFERENCE, NOT_CHECKED = "flagged", "passed", "reference", "not checked"
RULE = {
    "source": "mlperf_logging.rcp_checker",
    "benchmark": BENCHMARK,
    "ruleset": RULESET,
    "alpha": 0.05,
    "runs": RUNS,
    "reference_runs": REFERENCE_RUNS,
}


class _QuietChecker(logging.Filter):
    """Drops rcp_checker's own log lines (it logs each record and mean on the root logger at
    INFO, meant for its command line): a board with many entries would fill the master's log."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def filter(self, record: logging.LogRecord) -> bool:
        return record.pathname != self.path


@functools.cache
def _rcp_checker() -> Any:  # noqa: ANN401 - the mlperf_logging module
    """mlperf_logging's rcp_checker module, imported at the first check, its log quietened."""
    from mlperf_logging.rcp_checker import rcp_checker

    logging.getLogger().addFilter(_QuietChecker(rcp_checker.__file__))
    return rcp_checker


@dataclass(frozen=True)
class Key:
    """What a reference must share with the group it checks."""

    task: str
    goal: str
    algorithm: str
    lr_schedule: str
    dataset: str
    global_batch_size: int


def reference_point(epochs: Sequence[float], global_batch_size: int) -> dict[str, float]:
    """The RCP of reference runs that took `epochs` to converge, as rcp_checker computes it:
    mean (olympic), stdev, min_epochs (the least mean accepted) and max_speedup."""
    return dict(_point(tuple(float(e) for e in epochs), int(global_batch_size)))


@functools.lru_cache(maxsize=256)
def _point(epochs: tuple[float, ...], global_batch_size: int) -> dict[str, float]:
    """reference_point's numbers, made once per reference (a board checks many entries
    against one reference: each would build rcp_checker's tables again)."""
    point, _ = _rcp(epochs, global_batch_size)
    return {
        "mean": float(point["RCP Mean"]),
        "stdev": float(point["RCP Stdev"]),
        "min_epochs": float(point["Min Epochs"]),
        "max_speedup": float(point["Max Speedup"]),
    }


def _rcp(epochs: Sequence[float], bs: int) -> tuple[dict, Any]:
    record = {"Benchmark": BENCHMARK, "BS": bs, "Hyperparams": {},
              "Epochs to converge": [float(e) for e in epochs]}  # fmt: skip
    rcp_file = io.StringIO(json.dumps({"mlbench_reference": record}))
    checker = _rcp_checker().RCP_Checker(USAGE, RULESET, BENCHMARK, False, rcp_file)
    return checker.rcp_data["mlbench_reference"], checker


def check(
    epochs: Sequence[float | None], reference: Sequence[float], global_batch_size: int
) -> dict[str, Any]:
    """The check of one result on plain data: `epochs` its runs' epochs to target (None: did
    not reach it), `reference` the epochs of the reference runs that reached it."""
    out = _block(NOT_CHECKED, "", epochs)
    missed = sum(e is None for e in epochs)
    if len(reference) < REFERENCE_RUNS:
        out["reason"] = (
            f"the reference has {_runs(len(reference))} that reached the target; MLPerf's rule "
            f"needs {REFERENCE_RUNS}"
        )
        return out
    out["reference"] = reference_point(reference, global_batch_size)
    if len(epochs) < RUNS:
        out["reason"] = f"{_runs(len(epochs))} ended; MLPerf's rule needs {RUNS}"
        return out
    if missed > MAX_NOT_CONVERGED:
        out["reason"] = (
            f"{missed} runs did not reach the target; MLPerf's rule allows {MAX_NOT_CONVERGED} "
            "(insufficient convergence)"
        )
        return out
    given = [NOT_CONVERGED if e is None else float(e) for e in epochs]
    point, checker = _rcp(reference, global_batch_size)
    with tempfile.TemporaryDirectory() as scratch:  # where it would write its scaling.json
        passed, norm = checker._eval_submission_record(point, given, scratch)
    mean = out["olympic_mean_epochs"]
    out["norm_factor"] = float(norm)
    bound = out["reference"]["min_epochs"]
    if passed:
        out.update(status=PASSED, reason=f"olympic mean {mean:.4g} epochs >= {bound:.4g}")
    else:
        out.update(
            status=FLAGGED,
            flagged=True,
            reason=(
                f"converges faster than the reference allows: olympic mean {mean:.4g} epochs "
                f"< {bound:.4g} (reference mean {out['reference']['mean']:.4g}, p < 0.05)"
            ),
        )
    return out


def _block(status: str, reason: str, epochs: Sequence[float | None] = ()) -> dict[str, Any]:
    reached = [e for e in epochs if e is not None]
    missed = len(epochs) - len(reached)
    mean = None
    if len(epochs) >= 3 and missed <= MAX_NOT_CONVERGED:  # rcp_checker's slicing, a run each
        kept = sorted(reached)[1 : len(reached) - (1 - missed)]
        mean = statistics.fmean(kept) if kept else None
    return {
        "status": status,
        "flagged": False,
        "reason": reason,
        "epochs": list(epochs),
        "olympic_mean_epochs": mean,
        "norm_factor": None,
        "reference": None,
        "rule": RULE,
    }


@dataclass(frozen=True)
class Member:
    """What the check reads of one run: its set-up, its state, and of its grades whether
    the evaluator graded it and at which epoch its grades first met the goal
    (kept_runs.Kept: no point is read for it)."""

    pk: int
    seed: int
    division: str
    state: str
    series: int | None
    workers: int
    set_up: tuple[str, str, str, str, str]  # task, goal, algorithm, schedule, data set
    batch: Any  # the summary's config batch_size, as recorded (None: not recorded)
    graded: bool
    reached: bool
    epoch: float | None


def member(run: Run, kept: kept_runs.Kept) -> Member:
    return Member(
        run.pk, run.seed, run.division, run.state, run.series_id, run.num_workers, _set_up(run),
        result.read_config(run.summary or {}, "batch_size"), kept.graded, kept.reached, kept.epoch,
    )  # fmt: skip


def members_of(runs: Sequence[Run]) -> list[Member]:
    """`runs` as the check reads them, their kept results read in the queries of one
    kept_runs.of_runs."""
    kept = kept_runs.of_runs(runs)
    return [member(r, kept[r.pk]) for r in runs]


def of_group(
    runs: Sequence[Run],
    memo: dict[Any, Any] | None = None,
    loaded: dict[int, Member] | None = None,
) -> dict[str, Any]:
    """The check of a group of stored runs (one series' runs with one worker count, or one
    run), against the reference series of its task; `memo` keeps references found for a
    response, `loaded` the runs as `members_of` read them where the caller did."""
    memo = {} if memo is None else memo
    found = [loaded[r.pk] for r in runs] if loaded is not None else members_of(runs)
    made = inputs(found)
    key = made.get("key")
    if key is not None and Key(*key) not in memo:
        memo.update(references({Key(*key)}))
    return finish(made, memo)


def inputs(members: Sequence[Member]) -> dict[str, Any]:
    """What a group's check is made of, as JSON, apart from its reference: the finished
    check where it needs none (open division, pending, ungraded, no batch size:
    {"block"}), else its epochs to target, set-up key, seeds, series and worker count.
    The board keeps it with the entry (kept_entries.py) and finishes it at each read."""
    # By seed: the same order on the board, the series and an importing master (whose ids
    # differ: nothing installation-specific but the reference's series is in the block).
    members = sorted(members, key=lambda m: (m.seed, m.pk))
    unchecked = _not_checkable(members)
    if unchecked is not None:
        return {"block": unchecked}
    epochs, why = _epochs_of(members)
    if why:
        return {"block": _block(NOT_CHECKED, why)}
    key = _key_of(members)
    if isinstance(key, str):
        return {"block": _block(NOT_CHECKED, key, epochs)}
    first = members[0]
    return {"epochs": epochs, "key": list(dataclasses.astuple(key)),
            "seeds": [m.seed for m in members], "series": first.series,
            "workers": first.workers}  # fmt: skip


def finish(made: dict[str, Any], refs: dict[Key, dict[str, Any] | None]) -> dict[str, Any]:
    """The check of a group from its `inputs` and the reference series of its key (as
    `references` found them)."""
    if "block" in made:
        return made["block"]
    key, epochs = Key(*made["key"]), made["epochs"]
    ref = refs[key]
    if ref is None:
        return _block(NOT_CHECKED, f"no reference series for {_words(key)}", epochs)
    where = {"series": ref["series"], "num_workers": ref["num_workers"], "seeds": ref["seeds"]}
    if (made["series"], made["workers"]) == (ref["series"], ref["num_workers"]):
        out = _block(IS_REFERENCE, "this is the reference series", epochs)
        if len(ref["epochs"]) >= REFERENCE_RUNS:
            out["reference"] = reference_point(ref["epochs"], key.global_batch_size)
    else:
        out = check(epochs, ref["epochs"], key.global_batch_size)
    out["reference"] = {**where, "epochs": ref["epochs"], **(out["reference"] or {})}
    out["seeds"] = list(made["seeds"])
    return out


def of_groups(groups: Sequence[Sequence[Run]]) -> list[dict[str, Any]]:
    """`of_group` of every group of a response, in their order: the kept results of all
    their runs read at once and the references of all their set-ups in a few queries, so
    many groups cost the queries of one."""
    found = {m.pk: m for m in members_of([r for g in groups for r in g])}
    made = [inputs([found[r.pk] for r in g]) for g in groups]
    refs = references({Key(*m["key"]) for m in made if "key" in m})
    return [finish(m, refs) for m in made]


def _not_checkable(runs: Sequence[Member]) -> dict[str, Any] | None:
    """The block of a group whose runs are not checked at all (open division, pending)."""
    if any(r.division != "closed" for r in runs):
        return _block(NOT_CHECKED, "open division: only the closed division is checked")
    if any(r.state not in Run.FINAL_STATES for r in runs):
        return _block(NOT_CHECKED, "runs are still pending")
    return None


def _epochs_of(found: Sequence[Member]) -> tuple[list[float | None], str]:
    """Each run's epochs to target by its grades (rounded to the thousandth, as
    rcp_checker reads epoch_num), or why the group cannot be read so."""
    out: list[float | None] = []
    for m in found:
        if not m.graded:
            return [], f"the run of seed {m.seed} was not graded by the evaluator"
        if m.reached and m.epoch is None:
            return [], f"the run of seed {m.seed}: its reaching grade records no epoch"
        out.append(round(float(m.epoch), 3) if m.reached and m.epoch is not None else None)
    return out, ""


def _key_of(found: Sequence[Member]) -> Key | str:
    keys = set()
    for m in found:
        if m.batch is None:
            return f"the run of seed {m.seed} recorded no batch size"
        bs = int(m.batch) * m.workers
        keys.add(Key(*m.set_up, bs))
    if len(keys) != 1:
        return "its runs differ in task, goal, algorithm, schedule, data or global batch size"
    return keys.pop()


def references(keys: set[Key]) -> dict[Key, dict[str, Any] | None]:
    """The reference series group of each of `keys` (the module docstring), or None: the
    candidate runs of every key in one query, their kept results in those of one
    kept_runs.of_runs."""
    if not keys:
        return {}
    fields = ("task", "target", "algorithm", "lr_schedule", "dataset_used")
    wanted = {k: (k.task, k.goal, k.algorithm, k.lr_schedule, k.dataset) for k in keys}
    match = Q()
    for values in wanted.values():
        match |= Q(**dict(zip(fields, values, strict=True)))
    runs = list(
        origins.with_origins(
            Run.objects.filter(match, implementation=REFERENCE, series__isnull=False)
            .defer(*UNREAD).annotate(version=F("stored_result__version"))
            .order_by("series_id", "num_workers", "id")
        )
    )  # fmt: skip
    # The same candidates at the same versions, with the same trust: the same references.
    stamp = (
        frozenset(wanted.items()),
        signing.this_installation().public_key,
        tuple((r.pk, r.created_at, r.version, getattr(r, origins.TRUSTED_AS)) for r in runs),
    )
    known = _FOUND.get(stamp)
    if known is not None:
        return known
    found = _references(wanted, runs)
    if all(r.version is not None for r in runs):
        with _FOUND_LOCK:
            while len(_FOUND) >= FOUND_KEPT:
                _FOUND.pop(next(iter(_FOUND)))
            _FOUND[stamp] = found
    return found


# What the candidates' rows hold that the check never reads (the heavier JSON columns).
UNREAD = ("manifest", "job_metadata", "prices", "origin__bundle__manifest")
# The references found lately, by what they were found from (`references`' stamp: the
# keys, this installation's key, and each candidate run's id, creation, version and trusted
# name),
# so a read of the board finds them again without reading their runs' results. Exact: a
# change to a candidate raises its version (results/models.py), to trust its name.
_FOUND: dict[tuple, dict] = {}
FOUND_KEPT = 64
_FOUND_LOCK = threading.Lock()


def _references(wanted: dict[Key, tuple], runs: list[Run]) -> dict[Key, dict[str, Any] | None]:
    standings = standing.of_runs(runs)
    groups: dict[tuple[int, int], list[Run]] = defaultdict(list)
    for run in runs:
        groups[(run.series_id, run.num_workers)].append(run)
    # Each key's candidates: a group's runs of that set-up (as one query per key found them).
    candidates = {
        key: [
            (where, picked)
            for where, members in groups.items()
            if (picked := [r for r in members if _set_up(r) == values])
            and not any(r.division != "closed" or r.state not in Run.FINAL_STATES for r in picked)
            and not standing.of_entry(picked, standings)["unranked"]
        ]
        for key, values in wanted.items()
    }  # fmt: skip
    read = {r.pk for found in candidates.values() for _, picked in found for r in picked}
    loaded = {m.pk: m for m in members_of([r for r in runs if r.pk in read])}
    return {key: _best(key, found, loaded) for key, found in candidates.items()}


def _set_up(run: Run) -> tuple[str, str, str, str, str]:
    return (run.task, run.target, run.algorithm, run.lr_schedule, run.dataset_used)


def _best(
    key: Key, groups: list[tuple[tuple[int, int], list[Run]]], loaded: dict[int, Member]
) -> dict[str, Any] | None:
    """Of the candidate groups of `key`, the one with the most runs that reached the target
    (then the earliest series)."""
    best: dict[str, Any] | None = None
    for (series, workers), members in groups:
        found = [loaded[r.pk] for r in members]
        epochs, why = _epochs_of(found)
        if why or _key_of(found) != key:
            continue
        reached = [e for e in epochs if e is not None]
        if best is None or len(reached) > len(best["epochs"]):
            seeds = sorted(r.seed for r in members)
            best = {"series": series, "num_workers": workers, "seeds": seeds, "epochs": reached}
    return best


def _runs(n: int) -> str:
    """A count of runs in words: "1 run", "2 runs" (issue 50)."""
    return f"{n} run{'' if n == 1 else 's'}"


def _words(key: Key) -> str:
    return (
        f"{key.task} ({key.goal} goal, {key.algorithm or 'no algorithm'}, data "
        f"{key.dataset or 'not recorded'}, global batch {key.global_batch_size}) in the "
        f"closed division by the {REFERENCE} implementation"
    )
