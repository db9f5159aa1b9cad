"""The results board: every result of a task, local and imported, in sections that are
ranked apart (docs/publishing.rst, "The results board").

Why sections: a ranking is only fair between results measured the same way. A section is
one task, one division (closed: the reference worker; open: the user's own command), one
measure (time to target, or accuracy after a time budget), one kind of data (real, or
generated/unrecorded: a synthetic result never sits in a real ranking), one grader (the
platform's evaluator, or the run's own word: never ranked beside each other) and one number
of test examples graded on (graded_on.py: a result on 2,000 examples never ranks beside one
on the whole set). Local and imported results whose origin this installation trusts share
sections and are ranked by the one rule in `rank`; results of an unverified origin are in
sections of their own and never ranked, and a disputed one is not ranked (standing.py).

An entry is one group of runs measured together: the runs of a series with one worker
count (its seeds), or one run outside any series. Its numbers are the series statistics'
(`statistics.summarize`, one group) and its cost theirs (cost.py through the stored run),
so the board shows what the series page and `mlbench report` show, never its own sums;
an imported run this master re-graded and agrees with is read on this master's grades.
Its `convergence` is its check against the reference series of its task (convergence.py):
a flag for a reader to weigh, not a reason to unrank, as MLPerf's package checker lets a
failed RCP check through for review (`--rcp_bypass`).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, fields
from typing import Any

from django.db.models import QuerySet

from mlbench_master.api.models import Run
from mlbench_master.bundles import origins, signing
from mlbench_master.results import convergence, graded_on, standing, stored
from mlbench_master.results.statistics import summarize
from mlbench_worker.shared import catalogue, result

DIVISIONS = ("closed", "open")
MEASURES = ("time_to_target", "accuracy_after_time")
DATA = ("real", "synthetic")
EVALUATIONS = ("evaluated", "self-reported")
ORIGINS = ("local", "imported")
TRUST = ("trusted", "unverified")  # a section's origins: trusted here (or local), or not
MEASUREMENT_TASKS = tuple(name for name, info in catalogue.TASKS.items() if info.measurement)
# The measure's statistic an entry is ranked by, and whether lower is better.
SCORE = {"time_to_target": ("time_to_target", True), "accuracy_after_time": ("accuracy_after_time", False)}  # fmt: skip
LABELS = {
    "time_to_target": "time to target",
    "accuracy_after_time": "accuracy after time",
    "real": "real data",
    "synthetic": "synthetic (generated) data, or data not recorded",
    "evaluated": "evaluated by the platform",
    "self-reported": "self-reported, not evaluated",
}


@dataclass(frozen=True)
class Filters:
    """What a reader narrows the board to; None: any. Text dimensions match exactly,
    ignoring case; `origin` is local, imported, trusted, unverified, or an installation's
    fingerprint."""

    task: str | None = None
    division: str | None = None
    measured: str | None = None
    data: str | None = None
    evaluation: str | None = None
    origin: str | None = None
    hardware: str | None = None
    workers: int | None = None
    algorithm: str | None = None
    implementation: str | None = None
    network: str | None = None
    backend: str | None = None
    seed: int | None = None

    def applied(self) -> dict[str, Any]:
        return {
            f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None
        }


def board(filters: Filters) -> dict[str, Any]:
    """The board as GET /api/results/ answers it: the sections, each ranked."""
    # A measurement (the backend benchmark) has no target and no accuracy: nothing to rank.
    runs = Run.objects.order_by("id").exclude(task__in=MEASUREMENT_TASKS)
    if filters.task:
        runs = runs.filter(task=filters.task)
    found = [e for e in entries(origins.with_origins(runs)) if _matches(e, filters)]
    sections: dict[tuple, list[dict]] = defaultdict(list)
    for entry in found:
        sections[_section_key(entry)].append(entry)
    me = signing.this_installation()
    return {
        "installation": {"public_key": me.public_key, "fingerprint": me.fingerprint},
        "filters": filters.applied(),
        "count": len(found),
        "sections": [_section(key, rank(sections[key])) for key in sorted(sections, key=_order)],
    }


def entries(runs: QuerySet[Run]) -> list[dict[str, Any]]:
    """One entry per group of runs measured together (the module docstring)."""
    runs = list(runs)
    standings = standing.of_runs(runs)
    results = standing.results_of(runs, standings)
    here = {pk: s.judgement.examples for pk, s in standings.items() if s.here_grades}
    sizes = graded_on.of_runs(runs, here)
    groups: dict[tuple, list[Run]] = defaultdict(list)
    for run in runs:
        if run.series_id is not None:
            groups[("series", run.series_id, run.num_workers)].append(run)
        elif run.state in Run.FINAL_STATES:  # a lone run is a result once it has ended
            groups[("run", run.pk, run.num_workers)].append(run)
    me = signing.this_installation().fingerprint
    # Every entry's check against its reference series, read for all entries at once.
    checks = convergence.of_groups(list(groups.values()))
    return [
        {**_entry(key, members, [results[r.pk] for r in members], me,
                  standing.of_entry(members, standings), graded_on.of_entry(members, sizes)),
         "convergence": check}
        for (key, members), check in zip(groups.items(), checks, strict=True)
    ]  # fmt: skip


def rank(section: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ONE ranking rule, for local and imported entries alike: valid entries with a
    score first, best score first (the shortest median time to target, or the highest
    median accuracy after time), ties by fewer workers; the rest after them, unranked
    (`rank` null), with why in `unranked`."""
    ranked = [e for e in section if e["unranked"] == ""]
    rest = [e for e in section if e["unranked"] != ""]
    ranked.sort(
        key=lambda e: (e["score"] if e["lower_is_better"] else -e["score"], e["workers"], e["id"])
    )
    for place, entry in enumerate(ranked, start=1):
        entry["rank"] = place
    rest.sort(key=lambda e: (e["workers"], e["id"]))
    return ranked + rest


def _entry(
    key: tuple, runs: list[Run], results: list, me: str, stand: dict, size: dict
) -> dict[str, Any]:
    first = runs[0]
    target = stored.target_for(
        first.task, first.target, [r.dataset_used for r in runs if r.dataset_used]
    )
    stats = summarize(results, target)
    group = stats["groups"][0]
    measured = "accuracy_after_time" if first.time_budget else "time_to_target"
    statistic, lower = SCORE[measured]
    if measured == "accuracy_after_time" and target["direction"] == catalogue.DOWN:
        lower = True  # a goal reached from above (task 3's perplexity after time)
    score = group[statistic]["median"]
    # Why not ranked, the first that holds: an unverified origin or a disputed grade
    # (standing.py), grades counting different test sets, the group's validity, no score.
    unranked = stand["unranked"] or size["mixed"]
    if not unranked and not group["valid"]:
        unranked = group["invalid_reason"]
    elif not unranked and score is None:
        reaching = measured == "time_to_target"
        unranked = "no run reached the target" if reaching else "no finished run measured it"
    statuses = {r.evaluation for r in results if r.evaluation}
    origin = origins.of_run(first)
    entry_id = f"series-{key[1]}-x{key[2]}" if key[0] == "series" else f"run-{key[1]}"
    return {
        "id": entry_id,
        "task": first.task,
        "goal": target,
        "division": first.division,
        "measured": measured,
        "data": "synthetic" if target["synthetic"] or not target["datasets"] else "real",
        "datasets": target["datasets"],
        "evaluation": "evaluated" if statuses == {stored.EVALUATED} else "self-reported",
        "hardware": _hardware(first),
        "workers": first.num_workers,
        "algorithm": first.algorithm,
        "algorithm_source": first.algorithm_source,  # an uploaded algorithm's file, or ""
        "sent": _sent(runs),
        "implementation": first.implementation,
        "network": _network(first),
        "backend": first.backend,
        "seeds": sorted(r.seed for r in runs),
        "series": first.series_id,
        "statistics": group,
        "cost": {
            **stats["cost"],
            "cost_to_target": group["cost_to_target"],
            "run_cost": group["run_cost"],
            "price_per_hour": group["price_per_hour"],
            "price_index": group["price_index"],
        },  # fmt: skip
        "origin": {**_origin(origin, me), "trust": stand["trust"]},
        "regrade": stand["regrade"],
        "test_examples": size["test_examples"],
        "whole_test_set": size["whole_test_set"],
        "graded_on": size["graded_on"],
        "score": score,
        "lower_is_better": lower,
        "rank": None,
        "unranked": unranked,
        "links": _links(first.series_id, runs),
        "runs": [
            {
                "id": r.pk,
                "seed": r.seed,
                "state": r.state,
                "evaluation": res.evaluation,
                "time_to_target": res.time_to_target,
                "accuracy_after_time": res.accuracy_after_time,
            }
            for r, res in zip(runs, results, strict=True)
        ],  # fmt: skip
    }


def _sent(runs: list[Run]) -> dict[str, float | None]:
    """What a rank sent, the median over the entry's runs as their workers counted it (the
    trainer's count, whichever algorithm ran): per step, and to the target over the runs
    that reached it. The bytes are the algorithm's doing, not the grade's: read from the
    summaries, as the run page shows them. None: no run said."""

    def median(key: str) -> float | None:
        found = [v for r in runs if (v := result.read(r.summary or {}, key)) is not None]
        return statistics.median(found) if found else None

    return {"bytes_per_step": median("comm_bytes_per_step"),
            "bytes_to_target": median("comm_bytes_to_target")}  # fmt: skip


def _origin(origin: dict[str, Any] | None, me: str) -> dict[str, Any]:
    if origin is None:
        return {"kind": "local", "fingerprint": me, "public_key": None, "imported_at": None}
    keep = ("fingerprint", "public_key", "imported_at", "origin_run", "origin_series")
    return {"kind": "imported", **{k: origin[k] for k in keep}}


def _hardware(run: Run) -> str:
    """What each worker ran on, in the words the workers reported (their summary)."""
    found = result.read(run.summary or {}, "hardware") or {}
    if run.gpu_enabled:
        device = f"GPU {found.get('gpu') or '(model not recorded)'}"
    else:
        device = f"CPU {found.get('cpu_model') or '(model not recorded)'}"
    cores = "core" if run.num_cpus == 1 else "cores"
    return f"{device}, {run.num_cpus:g} {cores} per worker"


def _network(run: Run) -> str:
    text = f"{run.max_bandwidth} Mbit/s"
    return text + (f", {run.latency:g} ms latency" if run.latency else "")


def _links(series_id: int | None, runs: list[Run]) -> dict[str, Any]:
    """Paths on this master (the static board makes them absolute with the master's URL)."""
    out: dict[str, Any] = {
        "runs": [
            {
                "id": r.pk,
                "page": f"/runs/{r.pk}/",
                "api": f"/api/runs/{r.pk}/",
                "bundle": f"/api/runs/{r.pk}/bundle/",
                "mllog": f"/api/runs/{r.pk}/mllog/",
            }
            for r in runs
        ]  # fmt: skip
    }
    if series_id is not None:
        out["series"] = {
            "page": f"/series/{series_id}/",
            "api": f"/api/series/{series_id}/",
            "bundle": f"/api/series/{series_id}/bundle/",
        }
    return out


def _matches(entry: dict[str, Any], f: Filters) -> bool:
    exact = {
        "division": f.division,
        "measured": f.measured,
        "data": f.data,
        "evaluation": f.evaluation,
    }
    if any(v is not None and entry[k] != v for k, v in exact.items()):
        return False
    text = {"hardware": f.hardware, "algorithm": f.algorithm, "implementation": f.implementation,
            "network": f.network, "backend": f.backend}  # fmt: skip
    if any(v is not None and str(entry[k]).lower() != v.lower() for k, v in text.items()):
        return False
    if f.workers is not None and entry["workers"] != f.workers:
        return False
    if f.seed is not None and f.seed not in entry["seeds"]:
        return False
    if f.origin is not None and f.origin not in (
        entry["origin"]["kind"],
        entry["origin"]["fingerprint"],
        entry["origin"]["trust"]["status"],
        _trust_section(entry),
    ):
        return False
    return True


def _trust_section(entry: dict[str, Any]) -> str:
    return TRUST[0] if entry["origin"]["trust"]["trusted"] else TRUST[1]


def _section_key(entry: dict[str, Any]) -> tuple:
    return (
        entry["task"],
        _trust_section(entry),
        entry["division"],
        entry["measured"],
        entry["data"],
        entry["evaluation"],
        entry["test_examples"],
        entry["whole_test_set"],
        entry["graded_on"],
    )


def _order(key: tuple) -> tuple:
    task, origins_, division, measured, data, evaluation, examples, _, _ = key
    return (
        task,
        TRUST.index(origins_),
        DIVISIONS.index(division),
        MEASURES.index(measured),
        DATA.index(data),
        EVALUATIONS.index(evaluation),
        examples is None,  # the whole test set first (the most examples), unknown last
        -(examples or 0),
    )


def _section(key: tuple, ranked: list[dict[str, Any]]) -> dict[str, Any]:
    task, origins_, division, measured, data, evaluation, examples, whole, said = key
    label = f"{task}: {division} division, {LABELS[measured]}, {LABELS[data]}, {LABELS[evaluation]}, {said}"  # fmt: skip
    if origins_ == TRUST[1]:
        label += ", unverified origins (not ranked until this installation trusts their keys)"
    return {
        "task": task,
        "origins": origins_,
        "division": division,
        "measured": measured,
        "data": data,
        "evaluation": evaluation,
        "test_examples": examples,
        "whole_test_set": whole,
        "graded_on": said,
        "label": label,
        "entries": ranked,
    }
