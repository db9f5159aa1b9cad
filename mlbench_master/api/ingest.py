"""Validation and storage of posted metric points (one object, or a list of up to
MLBENCH_MAX_METRICS_PER_REQUEST).

A plain loop instead of DRF serializers: ingestion must sustain tens of thousands of
points per second on two cores. Every problem is reported with the point's index and
field, e.g. `[3].value: must be a finite number, got 'nan'`; a batch is stored whole or
not at all, by `metrics_store.store` (the one writer of metric points).
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from django.conf import settings
from django.utils import timezone
from rest_framework import exceptions
from rest_framework.fields import BooleanField

from mlbench_master.api.errors import PayloadTooLarge
from mlbench_master.api.models import Run
from mlbench_master.common.dates import parse_iso_datetime
from mlbench_master.runs import lifecycle
from mlbench_master.runs.metrics_store import Point
from mlbench_worker.shared.evaluation import GRADED_PREFIX

MAX_NAME = 200
MAX_UID = 200
MAX_POD_NAME = 253


def parse_points(payload: Any) -> tuple[list[Point], bool]:
    """Validated points from a request body; and whether the body was a list."""
    many = isinstance(payload, list)
    if not many and not isinstance(payload, dict):
        raise exceptions.ValidationError(
            {"": ["the body must be a metric object or a JSON list of metric objects"]}
        )
    items = payload if many else [payload]
    limit = settings.MLBENCH_MAX_METRICS_PER_REQUEST
    if len(items) > limit:
        raise PayloadTooLarge(
            f"{len(items)} points in one request; at most {limit} "
            "(MLBENCH_MAX_METRICS_PER_REQUEST): split the list"
        )
    errors: dict[str, list[str]] = {}
    rows: list[Point] = []
    now = timezone.now()
    for i, item in enumerate(items):
        prefix = f"[{i}]." if many else ""
        try:
            rows.append(_point(item, now))
        except _PointError as exc:
            errors.setdefault(prefix + exc.field, []).append(exc.message)
            if len(errors) >= 20:
                break
    if errors:
        raise exceptions.ValidationError(errors)
    return rows, many


class _PointError(Exception):
    def __init__(self, field: str, message: str) -> None:
        self.field, self.message = field, message


def _point(item: Any, now: dt.datetime) -> Point:
    if not isinstance(item, dict):
        raise _PointError("", "each point must be a JSON object")
    pod_name = item.get("pod_name")
    run_id = item.get("run_id")
    if (pod_name is None) == (run_id is None):
        which = "both were given" if pod_name is not None else "neither was given"
        raise _PointError(
            "run_id",
            f"give exactly one of pod_name and run_id (they are mutually exclusive); {which}",
        )
    if run_id is not None:
        run_id = _run_id(run_id)
    else:
        if not isinstance(pod_name, str) or not pod_name or len(pod_name) > MAX_POD_NAME:
            raise _PointError("pod_name", f"must be a non-empty string of at most {MAX_POD_NAME}")
        if "\x00" in pod_name:
            raise _PointError("pod_name", "must not contain NUL characters")

    name = item.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME:
        raise _PointError("name", f"must be a non-empty string of at most {MAX_NAME} characters")
    if "\x00" in name:
        raise _PointError("name", "must not contain NUL characters")
    if name.startswith(GRADED_PREFIX) and run_id is not None:
        # A grade a run could post itself would be no grade: only the master's evaluator
        # stores these (mlbench_master/grading/scoring.py).
        raise _PointError(
            "name",
            f"{name[:60]!r}: names starting with {GRADED_PREFIX!r} are the evaluator's grades; "
            f"post the predictions to /api/runs/{run_id}/predictions/ and the master grades them",
        )

    value = _value(item.get("value", _MISSING))

    date = item.get("date")
    if date is None:
        date = now
    elif isinstance(date, str):
        date = _date(date)
    else:
        raise _PointError("date", "must be an ISO 8601 string such as 2024-05-01T12:00:00Z")

    cumulative = item.get("cumulative", False)
    if cumulative is None:
        cumulative = False
    elif not isinstance(cumulative, bool):
        # the spellings the run fields take (DRF's BooleanField): "True", "false", "1", "no"...
        spelled = str(cumulative).strip().lower() if isinstance(cumulative, str | int) else None
        if spelled in BooleanField.TRUE_VALUES:
            cumulative = True
        elif spelled in BooleanField.FALSE_VALUES:
            cumulative = False
        else:
            raise _PointError("cumulative", "must be true or false")

    metadata = item.get("metadata")
    if metadata is None or metadata == "":  # a form body has no null: "" means none
        metadata = {}
    elif not _finite(metadata):
        # Python's JSON reader turns 1e400 into inf, and the store's JSON writer would
        # write that as null: refused here, where the point's index can be named.
        raise _PointError("metadata", "must hold finite numbers only (one is beyond float64)")

    uid = item.get("uid")
    if uid is not None:
        if isinstance(uid, int) and not isinstance(uid, bool):
            uid = str(uid)
        if not isinstance(uid, str) or not uid or len(uid) > MAX_UID or "\x00" in uid:
            raise _PointError("uid", f"must be a non-empty string of at most {MAX_UID} characters")

    return Point(
        run_id, pod_name if run_id is None else None, name, value, date, cumulative, metadata, uid
    )


_MISSING = object()


def _date(text: str) -> dt.datetime:
    try:  # the C parser takes the common forms (with 'Z' or an offset) in a microsecond
        value = dt.datetime.fromisoformat(text)
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return value
    except ValueError:
        pass
    parsed = parse_iso_datetime(text)
    if parsed is None:
        raise _PointError("date", f"{text[:40]!r} is not an ISO 8601 date and time")
    return parsed


def _finite(value: Any) -> bool:
    """Whether every number in a JSON value is finite.

    A loop rather than a recursive generator: a point's metadata is mostly a flat object
    of numbers, and this check runs for every point of every batch (0.9 ms a 1,000-point
    batch before, 0.6 now, in `timeit`)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        values = value.values()
    elif isinstance(value, list):
        values = value
    else:
        return True
    for v in values:
        if isinstance(v, float):
            if not math.isfinite(v):
                return False
        elif isinstance(v, dict | list) and not _finite(v):
            return False
    return True


def _run_id(raw: Any) -> int:
    if type(raw) is not int:  # a plain int, the common case, skips the conversions
        if isinstance(raw, bool):
            raise _PointError("run_id", "must be the integer id of a run")
        if isinstance(raw, str) and raw.strip().isdigit():
            raw = int(raw.strip())
    if not isinstance(raw, int) or not 0 < raw < 2**63:
        raise _PointError("run_id", f"must be the integer id of a run, got {str(raw)[:40]!r}")
    return raw


def _value(raw: Any) -> float:
    value = raw
    if type(raw) is not float:  # a plain float, the common case, skips the conversions
        if raw is _MISSING:
            raise _PointError("value", "is required (a finite number)")
        if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
            raise _PointError("value", f"must be a finite number, got {str(raw)[:40]!r}")
        try:
            value = float(raw.strip() if isinstance(raw, str) else raw)
        except (ValueError, OverflowError):
            raise _PointError("value", f"must be a finite number, got {str(raw)[:40]!r}") from None
    if not math.isfinite(value):
        raise _PointError("value", f"must be a finite number, got {str(raw)[:40]!r}")
    return value


def check_owner(rows: list[Point], worker_run: Run | None) -> None:
    """Unknown runs → 400 naming them; a worker token may only write its own run (403)."""
    if worker_run is not None:
        for row in rows:
            if row.run_id != worker_run.pk:
                target = f"run {row.run_id}" if row.run_id else f"pod {row.pod_name!r}"
                raise exceptions.PermissionDenied(
                    f"the worker token of run {worker_run.pk} may not post metrics of {target}"
                )
        return
    wanted = {row.run_id for row in rows if row.run_id is not None}
    if wanted:
        known = set(Run.objects.filter(pk__in=wanted).values_list("pk", flat=True))
        missing = sorted(wanted - known)
        if missing:
            names = ", ".join(str(m) for m in missing[:10])
            raise exceptions.ValidationError(
                {"run_id": [f"run {names} does not exist" if len(missing) == 1 else
                            f"runs {names} do not exist"]}
            )  # fmt: skip
        # Not on the workers' path: a worker token's run is active, never imported.
        lifecycle.refuse_imported(wanted, "metric points cannot be posted to it")
