"""Request and response shapes of run series (GET/POST /api/series/, a series' detail).

Apart from serializers.py because a series is a run request over seeds and worker counts
plus its members' states: it extends the run's create shape and lists runs in a shorter form.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from mlbench_master.api.models import Run, Series
from mlbench_master.api.serializers import EVALUATION_HELP, RunCreateSerializer
from mlbench_master.bundles import origins
from mlbench_master.results import stored
from mlbench_master.runs.run_queue import queue_position
from mlbench_master.runs.series import status


def _number_list(value: Any) -> Any:
    """A form body's "1,2,3" (or "1 2 3") as [1, 2, 3]; anything else unchanged."""
    if isinstance(value, str):
        parts = value.replace(",", " ").split()
        return [int(p) if p.lstrip("-").isdigit() else p for p in parts]
    return value


class SeriesCreateSerializer(RunCreateSerializer):
    """POST /api/series/: the fields of POST /api/runs/ (less `queue`: a series always
    queues) plus the seeds (or repeats) and the worker counts its runs go over."""

    queue = None  # type: ignore[assignment]
    seeds = serializers.ListField(
        child=serializers.IntegerField(),
        required=False,
        allow_null=True,
        help_text="the seeds, each once, e.g. [1, 2, 3] (a form may send 1,2,3)",
    )
    repeats = serializers.IntegerField(
        required=False, allow_null=True, help_text="N: seeds 1 to N (instead of seeds)"
    )
    workers = serializers.ListField(
        child=serializers.IntegerField(),
        required=False,
        allow_null=True,
        help_text="the worker counts, each once, e.g. [1, 2, 4]; default: num_workers or the "
        "default worker count",
    )

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if isinstance(data, dict):
            data = {k: _number_list(v) if k in ("seeds", "workers") else v for k, v in data.items()}
        return super().to_internal_value(data)


class SeriesRunSerializer(serializers.ModelSerializer):
    """A run as its series lists it."""

    queue_position = serializers.SerializerMethodField(
        help_text="its place in the master's queue while QUEUED, else null"
    )

    evaluation = serializers.SerializerMethodField(help_text=EVALUATION_HELP)

    def get_evaluation(self, run: Run) -> dict[str, Any]:
        listed = self.parent.instance if self.parent is not None else ()
        return stored.evaluation_of(run, self.context, listed or ())

    def get_queue_position(self, run: Run) -> int | None:
        return queue_position(run, self.context)

    class Meta:
        model = Run
        fields = ["id", "name", "seed", "num_workers", "state", "reason", "queue_position",
                  "created_at", "started_at", "finished_at", "evaluation"]  # fmt: skip
        read_only_fields = fields


class SeriesSerializer(serializers.ModelSerializer):
    """A series with its runs (GET /api/series/ and, with `statistics`, its detail)."""

    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    state = serializers.SerializerMethodField(
        help_text="queued, running, ended or cancelled (from its runs' states)"
    )
    runs = serializers.SerializerMethodField(help_text="its runs, in the order they run")
    origin = serializers.SerializerMethodField(
        help_text="null for a series of this installation; for an imported one its origin "
        "installation (public_key, fingerprint), its id there and the bundle"
    )

    def get_origin(self, series: Series) -> dict[str, Any] | None:
        return origins.of_series(series)

    def get_runs(self, series: Series) -> list[dict[str, Any]]:
        members = sorted(series.runs.all(), key=lambda r: r.pk)
        return SeriesRunSerializer(members, many=True, context=self.context).data

    def get_state(self, series: Series) -> str:
        return status(series, [r.state for r in series.runs.all()])

    class Meta:
        model = Series
        fields = ["id", "name", "created_at", "created_by", "state", "seeds", "worker_counts",
                  "settings", "cancelled_at", "runs", "origin"]  # fmt: skip
        read_only_fields = fields


class SeriesDetailSerializer(SeriesSerializer):
    """GET /api/series/<id>/: the series and its statistics (documents the shape)."""

    statistics = serializers.JSONField(
        read_only=True,
        help_text="per worker count (groups): runs, reached, valid, invalid_reason and "
        "{n, median, mean, sd, cv, min, max, olympic_mean} of time_to_target, "
        "accuracy_after_time, images_per_second, communication_share, speedup, efficiency; "
        "target; curves of every run; bands per worker count",
    )

    class Meta(SeriesSerializer.Meta):
        fields = [*SeriesSerializer.Meta.fields, "statistics"]
        read_only_fields = fields
