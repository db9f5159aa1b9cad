"""The one writer of studies and their cells: create (with the held-out draw and the reuse
of earlier cells) and cancel. Runs are stored through runs/series.py and change state only
through runs/lifecycle.py, as every run's do.

Reuse (docs/studies.rst, "Reusing a baseline"): a base cell already run by an earlier
study of this installation is not run again when everything that decides its number is
the same: the suite version, the algorithm with its completed options (and an uploaded
file's hash: the label says all three), the workload, the condition, the seeds, the worker
count, the CPUs per worker and the driver, and on the local driver the CPU model its runs
reported is this machine's. Only a series whose every run FINISHED is reused; the cell
says `reused` and which study ran it. Held-out variants are never reused: their draw is
this study's.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from mlbench_master import run_rules
from mlbench_master.api.models import Run, Study, StudyCell
from mlbench_master.runs import lifecycle
from mlbench_master.runs.series import cancel_series, store_series
from mlbench_master.studies.request import StudyPlan, parse, plan_cells, plan_variants
from mlbench_worker.shared import study_suite
from mlbench_worker.shared.host_cpu import cpu_model


def create_study(request: dict[str, Any], user: Any = None) -> Study:
    """Check the whole request, draw the held-out variants, store the study and queue its
    cells' runs (reusing what may be reused), then start the queue. RunRefused or
    StaffOnly leave nothing stored."""
    plan = parse(request)
    plan_cells(plan, user)  # the algorithms are fixed from here on
    variant_seed = None
    variants: dict[str, Any] = {}
    if plan.held_out:
        floor = study_suite.VARIANT_SEED_FLOOR
        variant_seed = floor + secrets.randbelow(run_rules.MAX_SEED - floor)
        variants = plan_variants(plan, variant_seed, user)
    reusable = _reusable(plan) if plan.reuse else {}
    with transaction.atomic():
        study = Study.objects.create(
            name=plan.name, created_by=lifecycle.creator(user),
            suite_version=study_suite.SUITE_VERSION, algorithms=plan.algorithms,
            workloads=plan.workloads, conditions=plan.conditions, seeds=plan.seeds,
            num_workers=plan.num_workers, num_cpus=plan.num_cpus,
            cluster=settings.MLBENCH_CLUSTER, variant_seed=variant_seed, variants=variants,
        )  # fmt: skip
        for cell in plan.cells:
            labelled = plan.algorithms[cell.algorithm]["label"]
            key = (labelled, cell.workload, cell.condition)
            earlier = None if cell.variant else reusable.get(key)
            StudyCell.objects.create(
                study=study, algorithm=labelled, workload=cell.workload,
                condition=cell.condition, variant=cell.variant, reused=earlier is not None,
                series=earlier or store_series(cell.series, user),
            )  # fmt: skip
    lifecycle.start_next()
    return study


def _reusable(plan: StudyPlan) -> dict[tuple[str, str, str], Any]:
    """(label, workload, condition) -> an earlier study's series this one may reuse."""
    found: dict[tuple[str, str, str], Any] = {}
    labels = {spec["label"] for spec in plan.algorithms}
    earlier = StudyCell.objects.filter(
        variant=False, series__isnull=False, algorithm__in=labels,
        workload__in=plan.workloads, condition__in=plan.conditions,
        study__suite_version=study_suite.SUITE_VERSION, study__num_workers=plan.num_workers,
        study__num_cpus=plan.num_cpus, study__cluster=settings.MLBENCH_CLUSTER,
        study__origin={},
    ).select_related("series").order_by("-id")  # fmt: skip
    here = cpu_model() if settings.MLBENCH_CLUSTER == "local" else None
    for cell in earlier:
        key = (cell.algorithm, cell.workload, cell.condition)
        if key in found or cell.series.seeds != plan.seeds:
            continue
        runs = list(Run.objects.filter(series=cell.series))
        if len(runs) != len(plan.seeds) or any(r.state != Run.FINISHED for r in runs):
            continue
        if here is not None and any(
            ((r.summary or {}).get("hardware") or {}).get("cpu_model") != here for r in runs
        ):
            continue
        found[key] = cell.series
    return found


def cancel_study(study: Study, by: str) -> bool:
    """Cancel `study`: the queued and active runs of its own cells (a reused cell's series
    is another study's, left alone); ended runs and their grades stay, and a cancelled run
    counts as a miss (outcomes.py). False when nothing of it was queued or active."""
    own = [c.series for c in study.cells.filter(reused=False, series__isnull=False)
           .select_related("series")]  # fmt: skip
    pending = (Run.QUEUED, *Run.ACTIVE_STATES)
    if not Run.objects.filter(series__in=own, state__in=pending).exists():
        return False
    Study.objects.filter(pk=study.pk, cancelled_at__isnull=True).update(cancelled_at=timezone.now())
    study.refresh_from_db()
    done = False
    for series in own:
        done = cancel_series(series, f"{by} (study {study.pk})") or done
    return done


def store_imported(
    record: dict[str, Any],
    series_by_origin_id: dict[int, Any],
    origin: dict[str, Any],
    created_at: Any = None,
    cancelled_at: Any = None,
) -> Study:
    """Store a study another master exported (bundles/study_member.py read its study.json
    and dated it; the import stored its runs and series first): its own fields as the
    origin recorded them, `origin` (its id there, the signer...), and its cells pointing at
    the series here (`series_by_origin_id`: a series' id at the origin -> the Series here).
    Never a score: outcomes.py computes it here from the imported runs' grades.

    Only a study of this master's suite version whose cells are its whole grid (every
    algorithm x workload x condition once, and every drawn variant once per algorithm) is
    stored: its budgets and its scoring are this suite's. Raises KeyError, TypeError,
    ValueError or Django's ValidationError naming the field for a record that does not make
    such a study; the caller's transaction then stores nothing.
    """
    version = record["suite_version"]
    if version != study_suite.SUITE_VERSION:
        raise ValueError(
            f"suite_version {version!r:.40}: this master scores studies of suite version "
            f"{study_suite.SUITE_VERSION!r} only (their workloads, budgets and conditions)"
        )
    algorithms = _listed(record, "algorithms", dict)
    labels = [a.get("label") for a in algorithms]
    if not all(isinstance(x, str) and x for x in labels) or len(set(labels)) != len(labels):
        raise ValueError("algorithms: each needs a label of its own")
    workloads = _listed(record, "workloads", str)
    conditions = _listed(record, "conditions", str)
    seeds = _listed(record, "seeds", int)
    if bad := [w for w in workloads if w not in study_suite.WORKLOADS]:
        raise ValueError(f"workloads: {bad[0]!r:.60} is no workload of suite {version}")
    if bad := [c for c in conditions if c not in study_suite.CONDITIONS]:
        raise ValueError(f"conditions: {bad[0]!r:.60} is no condition of suite {version}")
    variants, variant_seed = record.get("variants") or {}, record.get("variant_seed")
    if not isinstance(variants, dict) or bool(variants) != (variant_seed is not None):
        raise ValueError("variants and variant_seed: a held-out draw has both, none has neither")
    for workload, drawn in variants.items():
        budget = drawn.get("time_budget") if isinstance(drawn, dict) else None
        if workload not in workloads or not _positive(budget):
            raise ValueError(f"variants: {workload!r:.60} needs a workload of the study and a "
                             "positive time_budget")  # fmt: skip
    study = Study(
        name=str(record["name"])[:200], suite_version=version, algorithms=algorithms,
        workloads=workloads, conditions=conditions, seeds=seeds,
        num_workers=record["num_workers"], num_cpus=record["num_cpus"],
        cluster=str(record["cluster"])[:32], variant_seed=variant_seed, variants=variants,
        cancelled_at=cancelled_at, origin=dict(origin),
    )  # fmt: skip
    if created_at is not None:
        study.created_at = created_at
    study.full_clean(exclude=["created_by"])
    cells = _imported_cells(record.get("cells"), series_by_origin_id)
    grid = {(a, w, c, False) for a in labels for w in workloads for c in conditions}
    grid |= {(a, w, study_suite.HELD_OUT_CONDITION, True) for a in labels for w in variants}
    given = [(c["algorithm"], c["workload"], c["condition"], c["variant"]) for c in cells]
    if len(set(given)) != len(given) or set(given) != grid:
        odd = sorted(set(given) ^ grid, key=str) or ["a cell given twice"]
        raise ValueError(f"cells: not the study's grid of algorithms x workloads x conditions "
                         f"(and held-out variants) once each: {odd[0]!r:.160}")  # fmt: skip
    study.save()
    for c in cells:
        StudyCell.objects.create(
            study=study, algorithm=c["algorithm"], workload=c["workload"],
            condition=c["condition"], variant=c["variant"], reused=c["reused"], series=c["series"],
        )  # fmt: skip
    return study


def _listed(record: dict[str, Any], name: str, kind: type) -> list[Any]:
    value = record[name]
    if not isinstance(value, list) or not all(
        isinstance(v, kind) and not isinstance(v, bool) for v in value
    ):
        raise TypeError(f"{name}: not a list of {kind.__name__}")
    return value


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _imported_cells(cells: Any, series_by_origin_id: dict[int, Any]) -> list[dict[str, Any]]:
    """The cells of an imported study.json, each with its series here."""
    if not isinstance(cells, list) or not cells:
        raise ValueError("cells: a study has at least one cell")
    out = []
    for i, cell in enumerate(cells):
        if not isinstance(cell, dict):
            raise TypeError(f"cells[{i}] is not an object")
        named = cell.get("series")
        where = (f"cells[{i}] ({cell.get('algorithm')!r:.60} on {cell.get('workload')!r:.40} "
                 f"at {cell.get('condition')!r:.40})")  # fmt: skip
        if not all(isinstance(cell.get(k), str) for k in ("algorithm", "workload", "condition")):
            raise TypeError(f"{where}: algorithm, workload and condition are text")
        if not isinstance(cell.get("variant"), bool) or not isinstance(cell.get("reused"), bool):
            raise TypeError(f"{where}: variant and reused are true or false")
        if isinstance(named, bool) or not isinstance(named, int):
            raise TypeError(f"{where}: series {named!r:.40} is not a series id")
        if named not in series_by_origin_id:
            raise ValueError(f"{where}: series {named}, which the bundle does not hold")
        out.append({
            "algorithm": cell["algorithm"], "workload": cell["workload"],
            "condition": cell["condition"], "variant": cell["variant"], "reused": cell["reused"],
            "series": series_by_origin_id[named],
        })  # fmt: skip
    return out
