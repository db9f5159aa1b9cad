"""Request and response shapes of algorithm studies (GET/POST /api/studies/, a study's
detail). The request's rules are the study's own (mlbench_master/studies/request.py); this
module only types the body, so a wrong type is named as any field's is."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from mlbench_master.api.models import Run, Study
from mlbench_master.runs.series import status
from mlbench_worker.shared import study_suite


class StudyCreateSerializer(serializers.Serializer):
    """POST /api/studies/."""

    name = serializers.CharField(max_length=200)
    algorithms = serializers.ListField(
        child=serializers.JSONField(),
        help_text='the algorithms compared: names, or objects {"algorithm", "options", '
        '"algorithm_source"} (an uploaded file by its SHA-256), e.g. ["allreduce", '
        '{"algorithm": "powersgd", "options": {"rank": 2}}]',
    )
    workloads = serializers.ListField(
        child=serializers.CharField(), required=False, allow_null=True,
        help_text=f"the suite's workloads to use (default all: {', '.join(study_suite.WORKLOADS)})",
    )  # fmt: skip
    conditions = serializers.ListField(
        child=serializers.CharField(), required=False, allow_null=True,
        help_text=f"network conditions (default all: {', '.join(study_suite.CONDITIONS)})",
    )  # fmt: skip
    seeds = serializers.ListField(
        child=serializers.IntegerField(), required=False, allow_null=True,
        help_text="each cell's seeds (default [1])",
    )  # fmt: skip
    num_workers = serializers.IntegerField(required=False, allow_null=True, help_text="default 2")
    num_cpus = serializers.FloatField(
        required=False, allow_null=True, help_text="CPUs per worker (default: their share)"
    )
    held_out = serializers.BooleanField(
        required=False, allow_null=True,
        help_text="draw a held-out variant per workload after submission (default true)",
    )  # fmt: skip
    reuse = serializers.BooleanField(
        required=False, allow_null=True,
        help_text="reuse cells an earlier study ran the same way (default true)",
    )  # fmt: skip


def study_state(study: Study, states: list[str]) -> str:
    """queued, running, cancelled or ended: as a series' (runs/series.status)."""
    return status(study, states)


def study_json(study: Study) -> dict[str, Any]:
    """A study's own fields, its state and run counts (the list's entry)."""
    series = [c.series_id for c in study.cells.all() if c.series_id is not None]
    states = list(Run.objects.filter(series_id__in=series).values_list("state", flat=True))
    return {
        "id": study.pk,
        "name": study.name,
        "created_at": study.created_at.isoformat(),
        "created_by": study.created_by.get_username() if study.created_by_id else "",
        "state": study_state(study, states),
        **study.setup(),
        "held_out": None
        if study.variant_seed is None
        else {
            "seed": study.variant_seed,
            "condition": study_suite.HELD_OUT_CONDITION,
            "variants": study.variants,
        },  # fmt: skip
        "runs": {
            "total": len(states),
            "ended": sum(s in Run.FINAL_STATES for s in states),
            "queued": states.count(Run.QUEUED),
        },
        "cancelled_at": study.cancelled_at.isoformat() if study.cancelled_at else None,
        "origin": study.origin or None,
    }
