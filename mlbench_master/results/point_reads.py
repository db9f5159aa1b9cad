"""How the results read a run's metric points (stored.py): every point with its metadata,
in one query for many runs; or, for what a result takes of its many training points, one
row per run and metric made by PostgreSQL: the timings' step-weighted means (the time
split) and the throughput values without their metadata.

Why the second: a run posts its timings and throughput with every report, hundreds of points, and its
result needs one number of each. Reading every point with its metadata into Python was
most of the results board's time at 10,000 runs (about 900,000 rows, each with a JSON
object to decode). The arithmetic is StoredRun.time_split's, in the same order (each
point's weight its step less the previous point's, at least 1; sums in date order), so
both give the same float (tests/results/test_point_sums.py); on SQLite stored.py reads
the points and sums them in Python.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from django.db import connection

from mlbench_master.api.models import Metric

# A point's step as StoredRun.time_split reads it (int(metadata step or 0)): a JSON number
# truncated toward zero, true 1, the text of a whole number that number; else 0 (where
# Python's int() would refuse the text, and the read fail).
_STEP = """CASE jsonb_typeof(metadata->'step')
    WHEN 'number' THEN trunc((metadata->>'step')::numeric)
    WHEN 'boolean' THEN CASE WHEN (metadata->>'step')::boolean THEN 1 ELSE 0 END
    WHEN 'string' THEN CASE WHEN metadata->>'step' ~ '^\\s*[-+]?[0-9]+\\s*$'
                            THEN trim(metadata->>'step')::numeric ELSE 0 END
    ELSE 0 END"""

_WEIGHTED = f"""
SELECT run_id, name,
       sum(value * weight ORDER BY date, id) / sum(weight ORDER BY date, id)
FROM (
    SELECT run_id, name, date, id, value,
           greatest(step - lag(step, 1, 0) OVER (PARTITION BY run_id, name ORDER BY date, id),
                    1)::float8 AS weight
    FROM (SELECT run_id, name, date, id, value, {_STEP} AS step
          FROM {Metric._meta.db_table}
          WHERE run_id = ANY(%s::bigint[]) AND name = ANY(%s::varchar[])) AS points
) AS weighted
GROUP BY run_id, name
"""

_VALUES = f"""
SELECT run_id, name, array_agg(value ORDER BY date, id)
FROM {Metric._meta.db_table}
WHERE run_id = ANY(%s::bigint[]) AND name = ANY(%s::varchar[])
GROUP BY run_id, name
"""


def points_of(run_ids: Iterable[int], names: Iterable[str]) -> dict[int, dict[str, list]]:
    """run id -> metric name -> [(value, metadata)] in date order, in one query."""
    rows = (
        Metric.objects.filter(run_id__in=list(run_ids), name__in=list(names))
        .order_by("run_id", "name", "date", "id")
        .values_list("run_id", "name", "value", "metadata")
    )
    grouped: dict[int, dict[str, list]] = defaultdict(dict)
    for run_id, name, value, metadata in rows:
        grouped[run_id].setdefault(name, []).append(
            (value, metadata if isinstance(metadata, dict) else {})
        )
    return dict(grouped)


def available() -> bool:
    """Whether the database can make these sums (PostgreSQL); else stored.py sums."""
    return connection.vendor == "postgresql"


def weighted_means(run_ids: Iterable[int], names: Iterable[str]) -> dict[int, dict[str, float]]:
    """run id -> metric -> the mean of its points weighted by the steps each covers."""
    out: dict[int, dict[str, float]] = {}
    with connection.cursor() as cursor:
        cursor.execute(_WEIGHTED, [list(run_ids), list(names)])
        for run_id, name, mean in cursor.fetchall():
            out.setdefault(run_id, {})[name] = mean
    return out


def values(run_ids: Iterable[int], names: Iterable[str]) -> dict[int, dict[str, list]]:
    """run id -> metric -> [(value, {})] in date order: the values, without metadata (the
    throughput's mean reads nothing else)."""
    out: dict[int, dict[str, list]] = {}
    with connection.cursor() as cursor:
        cursor.execute(_VALUES, [list(run_ids), list(names)])
        for run_id, name, found in cursor.fetchall():
            out.setdefault(run_id, {})[name] = [(v, {}) for v in found]
    return out
