"""Run series: one benchmark over several seeds and/or worker counts, its runs queued in
the master's queue and run one after another.

A series is checked whole before anything is stored: every member goes through the same
run rules as a single run (run_rules.resolve), so a worker count over the limit is refused
for the series, naming `workers`, not discovered when its run's turn comes. Run states are
changed only through mlbench_master.runs.lifecycle (the queue, cancelling).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from mlbench_master import run_rules
from mlbench_master.api.models import Run, Series
from mlbench_master.run_rules.errors import Errors
from mlbench_master.runs import lifecycle

# The fields of a series request that are not fields of its runs.
SERIES_FIELDS = ("seeds", "repeats", "workers")
RUN_NAME_ROOM = 160  # a run's name is the series' name (cut here) and its seed and workers


def plan(request: dict[str, Any]) -> tuple[list[int], list[int], dict[str, Any]]:
    """The seeds, the worker counts and the shared run fields of a series request
    (already parsed by SeriesCreateSerializer); RunRefused naming the field when the
    combination is wrong or makes more than MLBENCH_SERIES_MAX_RUNS runs."""
    errors = Errors()
    shared = {k: v for k, v in request.items() if k not in SERIES_FIELDS}
    seeds = request.get("seeds")
    repeats = request.get("repeats")
    workers = request.get("workers")
    if seeds is not None and repeats is not None:
        errors.add("repeats", "give seeds or repeats, not both (repeats N means seeds 1..N)")
    if (seeds is not None or repeats is not None) and "seed" in shared:
        errors.add("seed", "a series takes seeds (or repeats); leave seed out")
    if workers is not None and "num_workers" in shared:
        errors.add("num_workers", "a series takes workers (a list); leave num_workers out")
    if "resume_from" in shared:
        errors.add("resume_from", "a series trains each run from scratch; leave it out")
    if seeds is not None:
        if not seeds:
            errors.add("seeds", "give at least one seed, e.g. [1, 2, 3]")
        elif len(set(seeds)) != len(seeds):
            twice = sorted({s for s in seeds if seeds.count(s) > 1})
            errors.add("seeds", f"seed(s) {', '.join(map(str, twice))} given twice: the same "
                       "seed gives the same run; give each seed once")  # fmt: skip
        elif bad := [s for s in seeds if not 0 <= s <= run_rules.MAX_SEED]:
            errors.add("seeds", f"seed {bad[0]} is not between 0 and {run_rules.MAX_SEED}")
    if repeats is not None and repeats < 1:
        errors.add("repeats", "repeats must be 1 or more")
    if workers is not None:
        if not workers:
            errors.add("workers", "give at least one worker count, e.g. [1, 2, 4]")
        elif len(set(workers)) != len(workers):
            errors.add("workers", "each worker count once, e.g. [1, 2, 4]")
    if errors:
        raise run_rules.RunRefused(dict(errors))
    if seeds is None:
        seeds = (
            list(range(1, repeats + 1))
            if repeats
            else [shared.pop("seed", run_rules.DEFAULTS["seed"])]
        )
    shared.pop("seed", None)
    if workers is None:
        workers = [shared.pop("num_workers", None)]
    shared.pop("num_workers", None)
    counts = [w for w in workers if isinstance(w, int)]
    if counts and shared.get("num_cpus") is None:
        # One CPU count for every run, the largest worker count's share of the machine
        # (run_rules/cores.py): a series compares its worker counts, which it could not do
        # if each count got a different share of the cores.
        shared["num_cpus"] = run_rules.default_cpus(max(counts))
    most = int(settings.MLBENCH_SERIES_MAX_RUNS)
    if len(seeds) * len(workers) > most:
        field = "repeats" if repeats is not None else "seeds"
        raise run_rules.RunRefused(
            {
                field: [
                    f"{len(seeds)} seeds x {len(workers)} worker counts make "
                    f"{len(seeds) * len(workers)} runs, more than the {most} a series may "
                    "have (MLBENCH_SERIES_MAX_RUNS); split it or give fewer"
                ]
            }  # fmt: skip
        )
    return list(seeds), list(workers), shared


@dataclass(frozen=True)
class Planned:
    """A series checked whole and not stored yet: its seeds, its runs' resolved fields (in
    the order they queue) and the fields they share."""

    seeds: list[int]
    members: list[dict[str, Any]]
    shared: dict[str, Any]


def resolve_series(request: dict[str, Any], user: Any = None) -> Planned:
    """Every member of a series request resolved by the run rules; RunRefused (every field
    named, a worker count's message under `workers`) or StaffOnly, with nothing stored.
    Apart from `store_series` so that a study (mlbench_master.studies) can check all its
    series before it stores any."""
    seeds, workers, shared = plan(request)
    errors = Errors()
    members = []
    for count in workers:
        asked = dict(shared, num_workers=count) if count is not None else dict(shared)
        # The seed asks nothing of the cluster: one answer serves every seed of the count.
        cluster = run_rules.cluster_limits(run_rules.fill(asked))
        try:
            members += [
                run_rules.resolve(run_rules.fill(dict(asked, seed=seed)), user, cluster)
                for seed in seeds
            ]
        except run_rules.RunRefused as exc:
            for field, messages in exc.errors.items():
                name = "workers" if field == "num_workers" and count is not None else field
                for message in messages:
                    text = f"{count} workers: {message}" if name == "workers" else message
                    if text not in errors.get(name, []):
                        errors.add(name, text)
    if errors:
        raise run_rules.RunRefused(dict(errors))
    return Planned(seeds, members, shared)


def store_series(planned: Planned, user: Any = None) -> Series:
    """Store a resolved series and its runs, QUEUED (worker counts in the order given, each
    over every seed); the caller holds the transaction and starts the queue."""
    seeds, members, shared = planned.seeds, planned.members, planned.shared
    name = str(shared["name"])
    series = Series.objects.create(
        name=name,
        created_by=lifecycle.creator(user),
        seeds=seeds,
        worker_counts=[m["num_workers"] for m in members[:: len(seeds)]],
        settings={k: v for k, v in shared.items() if k != "name"},
    )
    for fields in members:
        n = fields["num_workers"]
        label = f"{name[:RUN_NAME_ROOM]} (seed {fields['seed']}, {n} worker{'s' * (n != 1)})"
        lifecycle.new_run(dict(fields, name=label), user, Run.QUEUED, series=series)
    return series


def create_series(request: dict[str, Any], user: Any = None) -> Series:
    """Store a series and its runs (QUEUED), then start the first when nothing else is
    active or queued. A refused request (resolve_series) leaves nothing stored."""
    planned = resolve_series(request, user)
    with transaction.atomic():
        series = store_series(planned, user)
    lifecycle.start_next()
    return series


def cancel_series(series: Series, by: str) -> bool:
    """Cancel `series`: its queued runs leave the queue, its active run is cancelled (its
    processes stop); its ended runs and their results stay. False when nothing of it was
    queued or active (nothing to do).

    `cancelled_at` is set first, so `lifecycle.start_next` (called when the active run ends)
    no longer picks this series' queued runs while they are being cancelled.
    """
    pending = (Run.QUEUED, *Run.ACTIVE_STATES)
    if not Run.objects.filter(series=series, state__in=pending).exists():
        return False
    Series.objects.filter(pk=series.pk, cancelled_at__isnull=True).update(
        cancelled_at=timezone.now()
    )
    series.refresh_from_db()
    reason = f"series {series.pk} cancelled by {by}"
    done = False
    # Queued first: cancelling the active one starts the next queued run of another request.
    for state in pending:
        for run in Run.objects.filter(series=series, state=state).order_by("id"):
            done = lifecycle.cancel_run(run, reason=reason) or done
    return done


def delete_series(series: Series, by: str, *, staff: bool = False) -> None:
    """Cancel `series`, then delete it with its runs (their metrics, logs, checkpoints).
    A series of imported runs only when `staff` asks (lifecycle.ReadOnlyRun, nothing deleted)."""
    members = list(Run.objects.filter(series=series))
    if not staff:
        lifecycle.refuse_imported([r.pk for r in members], "its series cannot be deleted", True)
    cancel_series(series, by)
    for run in members:
        lifecycle.delete_run(run, by=by, staff=staff)
    series.delete()


def store_imported(record: dict[str, Any], created_at: Any, cancelled_at: Any) -> Series:
    """Store a series another master exported (bundles/importer.py read and dated it).

    Raises KeyError, TypeError, ValueError or Django's ValidationError for a record that
    does not make a series; nothing is stored then.
    """
    series = Series(
        name=str(record["name"])[:200],
        seeds=list(record.get("seeds") or []),
        worker_counts=list(record.get("worker_counts") or []),
        settings=dict(record.get("settings") or {}),
        cancelled_at=cancelled_at,
    )
    if created_at is not None:
        series.created_at = created_at
    series.full_clean(exclude=["created_by"])
    series.save()
    return series


def status(series: Series, states: list[str]) -> str:
    """One word for a series from its runs' states: queued, running, cancelled, ended."""
    if any(s in Run.ACTIVE_STATES for s in states):
        return "running"
    if any(s == Run.QUEUED for s in states):
        return "cancelled" if series.cancelled_at else "queued"
    return "cancelled" if series.cancelled_at else "ended"
