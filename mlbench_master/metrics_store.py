"""The one writer of metric points: `store(points)`, whoever measured them.

The API's ingest (`api/ingest.py`: points posted by workers and scripts, validated there)
and the collector (`collector.py`: the workers' resource readings) both end here, so every
point is written the same way: one statement per batch, a point whose `uid` is already
stored skipped (a retried post is stored once), points without a uid always stored.
tests/test_write_owners.py checks that nothing else in mlbench_master writes the metric
table. The caller validates: names, owners (exactly one of run and pod), finite values.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, NamedTuple

from django.db import connection, transaction

from mlbench_master.api.models import Metric


class Point(NamedTuple):
    """A metric point to store, in the column order of `store()`'s INSERT."""

    run_id: int | None
    pod_name: str | None
    name: str
    value: float
    date: dt.datetime
    cumulative: bool
    metadata: Any
    uid: str | None


_COLUMNS = Point._fields
_PG_TYPES = (
    "run_id bigint, pod_name text, name text, value double precision, date timestamptz, "
    "cumulative boolean, metadata jsonb, uid text"
)


def store(rows: list[Point]) -> None:
    """Insert all rows in one transaction; a point whose uid is already stored is skipped.

    On PostgreSQL the whole batch travels as ONE JSON parameter that the server unpacks
    (`json_to_recordset`) into an `INSERT ... ON CONFLICT DO NOTHING`: no model instances,
    no per-row parameters, so a 1,000-point batch costs a few milliseconds. Elsewhere
    (the embedded SQLite) a prepared single-row INSERT is executed for every row.
    """
    if not rows:
        return
    ops = connection.ops
    table = ops.quote_name(Metric._meta.db_table)
    columns = ", ".join(ops.quote_name(c) for c in _COLUMNS)
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            payload = json.dumps(
                [
                    {
                        "run_id": r.run_id,
                        "pod_name": r.pod_name,
                        "name": r.name,
                        "value": r.value,
                        "date": r.date.isoformat(),
                        "cumulative": r.cumulative,
                        "metadata": r.metadata,
                        "uid": r.uid,
                    }
                    for r in rows
                ],  # fmt: skip
                allow_nan=False,
            )
            cursor.execute(
                f"INSERT INTO {table} ({columns}) SELECT {columns} "
                f"FROM json_to_recordset(%s) AS x({_PG_TYPES}) ON CONFLICT DO NOTHING",
                [payload],
            )
            return
        adapt_date = ops.adapt_datetimefield_value
        cursor.executemany(
            f"INSERT INTO {table} ({columns}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT DO NOTHING",
            [
                (
                    r.run_id,
                    r.pod_name,
                    r.name,
                    r.value,
                    adapt_date(r.date),
                    r.cumulative,
                    json.dumps(r.metadata, allow_nan=False),
                    r.uid,
                )
                for r in rows
            ],  # fmt: skip
        )
