"""Reading metric series: filters, last-N and bucket averages, all computed by the database.

`summarize=N` gives at most N points per series (one owner, one metric name). A series of
at most N points is returned as it is. A longer one is cut into buckets of equal duration,
a whole number of seconds wide, `width = ceil((last second - first second + 1) / N)`,
counted from the series' first second; each non-empty bucket gives the average of its
points, dated at its last point and placed on the benchmark clock at its last point's
second (below).

The benchmark clock is one fact stored with each point: its metadata's `elapsed`
(mlbench_worker/shared/metric_points.py, CLOCK), read by the database and returned as the
point's `elapsed` by every read, a summarized bucket's being that of the point it is dated
at (its last: the newest date, the highest id among equal dates). The dashboard, the CLI and
the results use that value; none of them rebuilds it from dates. A point posted without one
(a pod's reading, a hand-made point) has no `elapsed`.

Whole seconds make the answer computable from per-second sums: on PostgreSQL a trigger
keeps them for run metrics (`MetricRollup`), so a run of millions of points is summarized
from a few thousand rows. Other cases (pods, `since`, `last_n`, SQLite) compute the same
buckets from the points, in SQL that PostgreSQL and SQLite both run.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from dataclasses import dataclass

from django.db import connection

from mlbench_master.api.models import Metric, MetricRollup
from mlbench_master.common.dates import iso
from mlbench_worker.shared.metric_points import CLOCK

TABLE = Metric._meta.db_table
ROLLUP = MetricRollup._meta.db_table


def _epoch_seconds(column: str) -> str:
    if connection.vendor == "postgresql":
        return f"CAST(floor(extract(epoch FROM {column})) AS bigint)"
    return f"CAST(strftime('%%s', {column}) AS INTEGER)"


def clock_sql(metadata: str) -> str:
    """SQL for a point's benchmark-clock second from its metadata column: the number under
    CLOCK, NULL when it is absent or not a number (metadata is whatever a client posted)."""
    if connection.vendor == "postgresql":
        return (
            f"CASE WHEN jsonb_typeof({metadata} -> '{CLOCK}') = 'number' "
            f"THEN CAST({metadata} ->> '{CLOCK}' AS double precision) END"
        )
    return (
        f"CASE WHEN json_type({metadata}, '$.{CLOCK}') IN ('integer', 'real') "
        f"THEN json_extract({metadata}, '$.{CLOCK}') END"
    )


def _date_text(expr: str) -> str:
    """The API's date text made by PostgreSQL itself: loading timestamps into Python
    datetimes only to print them again cost more than the whole query. (SQLite hands
    back text anyway; `iso()` normalizes it.)"""
    if connection.vendor == "postgresql":
        return f"to_char(({expr}) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
    return expr


@dataclass(frozen=True)
class SeriesQuery:
    owner: str  # "pod" | "run"
    key: str | int | None = None  # a pod name / run id; None: every pod (or run)
    since: dt.datetime | None = None
    names: list[str] | None = None
    last_n: int | None = None
    summarize: int | None = None

    @property
    def owner_col(self) -> str:
        return "pod_name" if self.owner == "pod" else "run_id"

    def _where(self) -> tuple[str, list]:
        col = self.owner_col
        where, params = [], []
        if self.key is None:
            where.append(f"{col} IS NOT NULL")
        else:
            where.append(f"{col} = %s")
            params.append(self.key)
        if self.since is not None:
            where.append("date > %s")
            params.append(self.since)
        if self.names:
            where.append(f"name IN ({', '.join(['%s'] * len(self.names))})")
            params.extend(self.names)
        return " AND ".join(where), params

    def sql(self, with_details: bool = False) -> tuple[str, list]:
        """SQL giving rows (owner, name, date, value[, cumulative, metadata-as-text], clock)
        in (owner, name, date) order, computed from the points themselves; `clock` is the
        point's benchmark-clock second (a bucket's: its last point's), NULL when unknown."""
        where, params = self._where()
        details = with_details and not self.summarize
        extra = ", cumulative, CAST(metadata AS TEXT) AS metadata" if details else ""
        base = (
            f"SELECT {self.owner_col} AS owner, name, date, value, id{extra}, "
            f"{clock_sql('metadata')} AS clock FROM {TABLE} WHERE {where}"
        )
        cols = f"owner, name, {_date_text('date')}, value" + (
            ", cumulative, metadata" if details else ""
        )
        if self.last_n and self.key is not None and connection.vendor == "postgresql":
            base, params = self._last_n_lateral(extra)
        elif self.last_n:
            base = (
                "SELECT * FROM (SELECT b.*, ROW_NUMBER() OVER (PARTITION BY owner, name "
                f"ORDER BY date DESC, id DESC) AS rk FROM ({base}) b) l WHERE rk <= %s"
            )
            params.append(self.last_n)
        if not self.summarize:
            return f"SELECT {cols}, clock FROM ({base}) q ORDER BY owner, name, date, id", params
        n = int(self.summarize)
        sql = (
            "WITH pts AS (SELECT owner, name, date, value, id, clock, "
            f"{_epoch_seconds('date')} AS sec FROM ({base}) q), "
            "stats AS (SELECT owner, name, COUNT(*) AS n, MIN(sec) AS s0, MAX(sec) AS s1 "
            "FROM pts GROUP BY owner, name), "
            "buckets AS (SELECT p.owner, p.name, p.date, p.value, p.id, p.clock, "
            f"CASE WHEN s.n <= {n} THEN p.id "
            f"ELSE (p.sec - s.s0) / ((s.s1 - s.s0 + {n}) / {n}) END AS bucket FROM pts p "
            "JOIN stats s ON p.owner = s.owner AND p.name = s.name), "
            "ranked AS (SELECT b.*, ROW_NUMBER() OVER (PARTITION BY owner, name, bucket "
            "ORDER BY date DESC, id DESC) AS newest FROM buckets b) "
            f"SELECT owner, name, {_date_text('MAX(date)')}, AVG(value), "
            "MAX(CASE WHEN newest = 1 THEN clock END) FROM ranked "
            "GROUP BY owner, name, bucket ORDER BY owner, name, MAX(date)"
        )
        return sql, params

    def _last_n_lateral(self, extra: str) -> tuple[str, list]:
        """The last N points of each metric of one owner, read backwards from the
        (owner, name, date) index: the metric names by a loose index scan (one probe per
        name), then N rows per name, instead of numbering every point of the series."""
        col = self.owner_col
        lateral_extra = ", m.cumulative, CAST(m.metadata AS TEXT) AS metadata" if extra else ""
        since = " AND date > %s" if self.since is not None else ""
        names = " AND name IN (" + ", ".join(["%s"] * len(self.names)) + ")" if self.names else ""
        names_params = list(self.names or [])
        since_params = [self.since] if self.since is not None else []
        sql = (
            "WITH RECURSIVE t(name) AS ("
            f"SELECT MIN(name) FROM {TABLE} WHERE {col} = %s "
            f"UNION ALL SELECT (SELECT MIN(name) FROM {TABLE} WHERE {col} = %s AND name > t.name) "
            "FROM t WHERE t.name IS NOT NULL) "
            f"SELECT %s AS owner, t.name, m.date, m.value, m.id{lateral_extra}, "
            f"{clock_sql('m.metadata')} AS clock FROM t CROSS JOIN LATERAL ("
            f"SELECT date, value, id, cumulative, metadata FROM {TABLE} "
            f"WHERE {col} = %s AND name = t.name{since} ORDER BY date DESC, id DESC LIMIT %s) m "
            f"WHERE t.name IS NOT NULL{names.replace('name IN', 't.name IN')}"
        )
        params = [self.key, self.key, self.key, self.key, *since_params, self.last_n, *names_params]
        return sql, params

    @property
    def uses_rollup(self) -> bool:
        """Whether the per-second sums can answer (a whole run, no since / last_n)."""
        return (
            connection.vendor == "postgresql"
            and self.owner == "run"
            and self.key is not None
            and bool(self.summarize)
            and self.since is None
            and not self.last_n
        )


def _rollup_rows(query: SeriesQuery) -> list[tuple]:
    """(owner, name, date, value, clock) rows of a summarized run, read from MetricRollup
    (the buckets: `_bucket_sql`) and, for series of at most N points, from the points."""
    short, long = _split(query)
    rows: list[tuple] = []
    with connection.cursor() as cursor:
        if short:
            cursor.execute(
                f"SELECT run_id, name, {_date_text('date')}, value, {clock_sql('metadata')} "
                f"FROM {TABLE} "
                "WHERE run_id = %s AND name IN "
                f"({', '.join(['%s'] * len(short))}) ORDER BY name, date, id",
                [query.key, *short],
            )
            rows += cursor.fetchall()
        if long:
            cursor.execute(
                _bucket_sql(len(long), "run_id, r.name, ") + " ORDER BY r.name, MAX(r.last_date)",
                [v for item in long for v in item] + [query.key],
            )
            rows += cursor.fetchall()
    rows.sort(key=lambda r: r[1])  # stable: keeps each series' date order
    return rows


def summarized_json(query: SeriesQuery) -> str | None:
    """The answer of a summarized run read (`series(query)[run]`) as JSON text written by
    PostgreSQL, or None where the rollups do not answer it (then `series` does). On a
    1,000,000-point run, handing 9,501 rows to Python, making a dict of each and rendering
    them cost as much CPU as the query itself; PostgreSQL writes the same text (the
    compact form DRF's renderer writes, numbers by their shortest exact form, `elapsed`
    only where the point has a clock) for a sixth of that. Concatenated text rather than
    jsonb: building jsonb values cost more than the Python it replaced."""
    if not query.uses_rollup or connection.vendor != "postgresql":
        return None
    short, long = _split(query)
    parts, params = [], []
    if short:
        parts.append(
            f"SELECT name, date AS at, id AS tie, {_date_text('date')} AS d, value AS v, "
            f"{clock_sql('metadata')} AS c FROM {TABLE} WHERE run_id = %s AND name IN "
            f"({', '.join(['%s'] * len(short))})"
        )
        params += [query.key, *short]
    if long:
        parts.append(_bucket_sql(len(long), "name, MAX(r.last_date) AS at, 0 AS tie, "))
        params += [v for item in long for v in item] + [query.key]
    if not parts:
        return "{}"
    point = (
        """'{"date":"' || d || '","value":' """
        "|| v::text "
        """|| CASE WHEN c IS NULL THEN '' ELSE ',"elapsed":' || c::text END || '}'"""
    )
    with connection.cursor() as cursor:
        # Shortest exact digits (PostgreSQL's default, set in case a server changed it).
        cursor.execute("SET extra_float_digits = 1")
        cursor.execute(
            "SELECT '{' || COALESCE(string_agg(to_json(name)::text || ':[' || points || ']', "
            "',' ORDER BY name), '') || '}' FROM ("
            f"SELECT name, string_agg({point}, ',' ORDER BY at, tie) AS points FROM ("
            f"{' UNION ALL '.join(parts)}) p GROUP BY name) s",
            params,
        )
        return cursor.fetchone()[0]


def _split(query: SeriesQuery) -> tuple[list[str], list[tuple[str, int, int]]]:
    """The run's series to read whole (at most N points) and those read as buckets, with
    their first second and bucket width, from the rollups' counts."""
    n = int(query.summarize or 0)
    name_filter, params = "", [query.key]
    if query.names:
        name_filter = f" AND name IN ({', '.join(['%s'] * len(query.names))})"
        params += query.names
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT name, SUM(count), MIN(second), MAX(second) FROM {ROLLUP} "
            f"WHERE run_id = %s{name_filter} GROUP BY name ORDER BY name",
            params,
        )
        stats = cursor.fetchall()
    short = [name for name, count, _, _ in stats if count <= n]
    long = [(name, s0, (s1 - s0 + n) // n) for name, count, s0, s1 in stats if count > n]
    return short, long


def _bucket_sql(series: int, leading: str) -> str:
    """The buckets of `series` long series from the rollups: each dated at its newest
    second's last point and placed at that point's clock, both kept by the rollup rows
    (migration 0019), so no point is looked up. Parameters: (name, s0, width) per series,
    then the run.

    Two choices measured on 10,000 rollup rows (bench_api.py's run), interleaved, 25 rounds:
    the bucket's clock is that of its newest second (a series has one rollup row a second,
    so the newest second holds the newest point), taken as the greatest [second, clock]
    array rather than by sorting each bucket's rows in an ordered array_agg; and the counts
    are summed as float8 (exact below 2**53) rather than as bigint, whose SUM is numeric.
    Together: 51 ms against 69 for the whole summarized answer."""
    values = ", ".join(["(%s, %s, %s)"] * series)
    return (
        f"SELECT r.{leading}{_date_text('MAX(r.last_date)')} AS d, "
        "SUM(r.total) / SUM(r.count::float8) AS v, "
        "(MAX(ARRAY[r.second::float8, r.last_clock]))[2] AS c "
        f"FROM {ROLLUP} r JOIN (VALUES {values}) AS b(name, s0, width) "
        "ON r.name = b.name WHERE r.run_id = %s "
        "GROUP BY r.run_id, r.name, (r.second - b.s0) / b.width"
    )


def _rows(query: SeriesQuery, with_details: bool = False) -> list[tuple]:
    if query.uses_rollup:
        return _rollup_rows(query)
    sql, params = query.sql(with_details=with_details)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _decode(metadata: object) -> object:
    """A point's metadata as the database hands it back (JSON text) -> the JSON value."""
    return json.loads(metadata) if isinstance(metadata, (str, bytes)) else metadata


def series(query: SeriesQuery, details: bool = False) -> dict[str, dict[str, list[dict]]]:
    """{owner: {metric name: [{"date", "value"[, "elapsed"]}, ...]}} for the query: a point
    placed on the benchmark clock carries it as "elapsed" (a bucket: its last point's); with
    `details`, every point also carries its "cumulative" flag and its "metadata" (the
    stored JSON, decoded). Summarized points are averages of several points: they have no details, so
    `details` needs a query without `summarize` (the view answers 400 otherwise)."""
    if details and query.summarize:
        raise ValueError("details are not available for summarized points")
    out: dict[str, dict[str, list[dict]]] = {}
    current_key = None
    points: list[dict] = []
    for row in _rows(query, with_details=details):
        owner, name, date, value = row[:4]
        key = (owner, name)
        if key != current_key:
            points = out.setdefault(str(owner), {}).setdefault(name, [])
            current_key = key
        point = {"date": iso(date), "value": value}
        if row[-1] is not None:
            point["elapsed"] = float(row[-1])
        if details:
            point.update(cumulative=bool(row[4]), metadata=_decode(row[5]))
        points.append(point)
    return out


def stream_rows(query: SeriesQuery, chunk_size: int = 5000) -> Iterator[tuple]:
    """Rows (owner, name, date, value[, cumulative, metadata], clock) read in chunks through a
    server-side cursor on PostgreSQL, so memory does not grow with the series."""
    if query.summarize:  # at most N rows per metric: small
        yield from _rows(query)
        return
    sql, params = query.sql(with_details=True)
    with connection.chunked_cursor() as cursor:
        cursor.execute(sql, params)
        while True:
            rows = cursor.fetchmany(chunk_size)
            if not rows:
                return
            yield from rows
