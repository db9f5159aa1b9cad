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
