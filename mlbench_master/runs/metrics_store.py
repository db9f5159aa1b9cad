"""The one writer of metric points: `store(points)`, whoever measured them.

The API's ingest (`api/ingest.py`: points posted by workers and scripts, validated there)
and the collector (`collector.py`: the workers' resource readings) both end here, so every
point is written the same way: one statement per batch, a point whose `uid` is already
stored skipped (a retried post is stored once), points without a uid always stored.
tests/test_write_owners.py checks that nothing else in mlbench_master writes the metric
table. The caller validates: names, owners (exactly one of run and pod), finite values.

A batch may also take the place of points already stored (`Replaced`): the evaluator's
grades of a step posted again replace that step's grades (mlbench_master/grading/scoring.py). They
are deleted in the same transaction, and on PostgreSQL the per-second sums of their seconds
(`MetricRollup`, kept by an insert-only trigger) are counted again from the points left, so
a summarized series never averages a replaced grade in.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, NamedTuple

import orjson
from django.db import IntegrityError, connection, transaction
from psycopg.errors import UniqueViolation

from mlbench_master.api.models import Metric, MetricRollup
from mlbench_master.runs.metric_reads import clock_sql


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
_EPOCH, _SECOND = dt.datetime(1970, 1, 1, tzinfo=dt.UTC), dt.timedelta(seconds=1)
# Each column read from a batch's element `e` (a JSON array in `Point`'s order), typed.
# A null metadata stays NULL, which the column refuses, as json_to_recordset's reading did.
_PG_READS = (
    "(e->>0)::bigint, e->>1, e->>2, (e->>3)::double precision, (e->>4)::timestamptz, "
    "(e->>5)::boolean, NULLIF(e->6, 'null'::jsonb), e->>7"
)


class Replaced(NamedTuple):
    """Stored points a batch takes the place of: the run's points of these names whose
    metadata has `key` equal to `value` (e.g. the grades of one step)."""

    run_id: int
    names: tuple[str, ...]
    key: str
    value: Any


def store(rows: list[Point], *, replaces: Replaced | None = None) -> None:
    """Insert all rows in one transaction; a point whose uid is already stored is skipped.
    With `replaces`, the points it names are deleted first, in the same transaction (a
    batch of no rows then only deletes).

    On PostgreSQL the whole batch travels as ONE JSON parameter, an array of rows that the
    server unpacks (`jsonb_array_elements`) into one INSERT: no model instances, no per-row
    parameters (`_insert_batch`). Elsewhere (the embedded SQLite) a prepared single-row
    INSERT is executed for every row.
    """
    if not rows and replaces is None:
        return
    ops = connection.ops
    table = ops.quote_name(Metric._meta.db_table)
    columns = ", ".join(ops.quote_name(c) for c in _COLUMNS)
    batch = (
        f"INSERT INTO {table} ({columns}) SELECT {_PG_READS} "
        "FROM jsonb_array_elements(%s::jsonb) AS e"
    )
    if replaces is None and connection.vendor == "postgresql":
        _insert_batch(batch, rows)
        return
    with transaction.atomic(), connection.cursor() as cursor:
        if replaces is not None:
            _forget(replaces)
        if not rows:
            return
        if connection.vendor == "postgresql":
            _insert_batch(batch, rows)
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


def _insert_batch(insert: str, rows: list[Point]) -> None:
    """PostgreSQL: the batch as one statement (`insert`, made by `store`, whose parameter
    is the JSON of the rows), a point whose uid is stored skipped.

    Measured on 1,000-point batches (bench_api.py's points, in turns): the same INSERT
    with ON CONFLICT DO NOTHING cost 36 ms at the database against 30 without, and
    PostgreSQL's COPY 27. So the plain INSERT goes first, inside a savepoint, and only a
    unique violation (a retried batch, a uid given twice) sends the batch again with ON
    CONFLICT DO NOTHING, which stores what is new; the failed attempt left nothing.
    """
    payload = _payload(rows)
    with connection.cursor() as cursor:
        try:
            with transaction.atomic():
                cursor.execute(insert, [payload])
            return
        except IntegrityError as exc:
            if not isinstance(exc.__cause__, UniqueViolation):
                raise
        with transaction.atomic():
            cursor.execute(insert + " ON CONFLICT DO NOTHING", [payload])


def _payload(rows: list[Point]) -> str:
    """The batch as a JSON array of rows, each an array in `Point`'s order.

    Arrays rather than objects named by column: PostgreSQL reads a 1,000-row batch of them
    into rows in 7.2 ms of CPU against 10.2 for `json_to_recordset` over objects (measured
    into a table without indexes), and the text is some 40 % shorter. The batch is jsonb,
    whose numbers are `numeric`, which has no negative zero: a value of zero travels as its
    text ("-0.0"), so -0.0 is stored as -0.0.

    orjson writes it in a sixth of the standard library's time; it refuses an integer
    beyond 64 bits, which metadata may hold, and the standard library then writes it
    exactly. orjson writes NaN as null where the standard library raised: callers store
    finite values only (module docstring), and the doors refuse non-finite metadata
    (api/ingest.py, bundles/importer.py). A date is handed over in UTC: orjson rounds an
    offset to whole minutes, which would move a date given at +05:30:15."""
    utc = (dt.UTC, None)
    arrays = [
        [r.run_id, r.pod_name, r.name, r.value or repr(r.value),
         r.date if r.date.tzinfo in utc else r.date.astimezone(dt.UTC),
         r.cumulative, r.metadata, r.uid]
        for r in rows
    ]  # fmt: skip
    try:
        return orjson.dumps(arrays).decode()
    except orjson.JSONEncodeError:
        for a in arrays:
            a[4] = a[4].isoformat()
        return json.dumps(arrays, allow_nan=False)


def _forget(replaced: Replaced) -> None:
    """Delete the points `replaced` names; on PostgreSQL recount their seconds' sums from
    the points left (a sum left at zero points is deleted). Called inside `store`'s
    transaction."""
    gone = Metric.objects.filter(
        run_id=replaced.run_id,
        name__in=replaced.names,
        **{f"metadata__{replaced.key}": replaced.value},
    )
    found = gone.values_list("name", "date")
    seconds = sorted({(name, (date - _EPOCH) // _SECOND) for name, date in found})
    if not seconds:
        return
    gone.delete()
    if connection.vendor != "postgresql":
        return  # SQLite keeps no sums: summaries are computed from the points
    table = connection.ops.quote_name(Metric._meta.db_table)
    rollup = connection.ops.quote_name(MetricRollup._meta.db_table)
    keys = json.dumps([{"name": name, "second": second} for name, second in seconds])
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {rollup} AS r SET count = s.count, total = s.total, "
            "last_date = COALESCE(s.last_date, r.last_date), last_id = s.last_id, "
            "last_clock = s.last_clock FROM ("
            "SELECT k.name, k.second, count(m.id) AS count, COALESCE(sum(m.value), 0) AS total, "
            "max(m.date) AS last_date, "
            "(array_agg(m.id ORDER BY m.date DESC, m.id DESC))[1] AS last_id, "
            f"(array_agg({clock_sql('m.metadata')} ORDER BY m.date DESC, m.id DESC))[1] "
            "AS last_clock "
            "FROM json_to_recordset(%s) AS k(name text, second bigint) "
            f"LEFT JOIN {table} AS m ON m.run_id = %s AND m.name = k.name "
            "AND m.date >= to_timestamp(k.second) AND m.date < to_timestamp(k.second + 1) "
            "GROUP BY k.name, k.second) AS s "
            "WHERE r.run_id = %s AND r.name = s.name AND r.second = s.second",
            [keys, replaced.run_id, replaced.run_id],
        )
        cursor.execute(f"DELETE FROM {rollup} WHERE run_id = %s AND count = 0", [replaced.run_id])
