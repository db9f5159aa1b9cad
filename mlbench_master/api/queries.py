"""Reading metric series: filters, last-N and bucket averages, all computed by the database.

`summarize=N` splits each series (one owner, one metric name) into at most N buckets of
consecutive points (equal counts, ±1) and returns each bucket's average value with the
date of its last point. The SQL uses window functions that PostgreSQL and SQLite both
have, so the embedded SQLite master answers the same way.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass

from django.db import connection

from mlbench_master.api.models import Metric

TABLE = Metric._meta.db_table


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

    def sql(self, with_details: bool = False) -> tuple[str, list]:
        """SQL giving rows (owner, name, date, value[, cumulative, metadata-as-text]) in
        (owner, name, date) order."""
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
        extra = ", cumulative, CAST(metadata AS TEXT) AS metadata" if with_details else ""
        if self.summarize:
            extra = ""
        base = f"SELECT {col} AS owner, name, date, value, id{extra} FROM {TABLE} WHERE " + (
            " AND ".join(where)
        )
        cols = "owner, name, date, value" + (", cumulative, metadata" if extra else "")
        if self.last_n:
            base = (
                f"SELECT * FROM (SELECT b.*, ROW_NUMBER() OVER (PARTITION BY owner, name "
                f"ORDER BY date DESC, id DESC) AS rk FROM ({base}) b) l WHERE rk <= %s"
            )
            params.append(self.last_n)
        if not self.summarize:
            return f"SELECT {cols} FROM ({base}) q ORDER BY owner, name, date, id", params
        sql = (
            "SELECT owner, name, MAX(date) AS date, AVG(value) AS value FROM ("
            "SELECT owner, name, date, value, "
            "ROW_NUMBER() OVER (PARTITION BY owner, name ORDER BY date, id) - 1 AS rn, "
            "COUNT(*) OVER (PARTITION BY owner, name) AS n "
            f"FROM ({base}) q) w "
            "GROUP BY owner, name, (rn * %s) / n ORDER BY owner, name, MAX(date)"
        )
        params.append(self.summarize)
        return sql, params


def as_utc(value: dt.datetime | str) -> dt.datetime:
    """A database date as an aware UTC datetime (SQLite's aggregates give strings)."""
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    if value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC)


def iso(value: dt.datetime | str) -> str:
    """The API's date format: ISO 8601, UTC, microseconds, 'Z' (as the seeds show)."""
    return as_utc(value).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def series(query: SeriesQuery) -> dict[str, dict[str, list[dict]]]:
    """{owner: {metric name: [{"date", "value"}, ...]}} for the query."""
    sql, params = query.sql()
    out: dict[str, dict[str, list[dict]]] = {}
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        current_key = None
        points: list[dict] = []
        for owner, name, date, value in cursor.fetchall():
            key = (owner, name)
            if key != current_key:
                points = out.setdefault(str(owner), {}).setdefault(name, [])
                current_key = key
            points.append({"date": iso(date), "value": value})
    return out


def stream_rows(query: SeriesQuery, chunk_size: int = 5000) -> Iterator[tuple]:
    """Rows (owner, name, date, value[, cumulative, metadata]) read in chunks through a
    server-side cursor on PostgreSQL, so memory does not grow with the series."""
    sql, params = query.sql(with_details=not query.summarize)
    with connection.chunked_cursor() as cursor:
        cursor.execute(sql, params)
        while True:
            rows = cursor.fetchmany(chunk_size)
            if not rows:
                return
            yield from rows


def names_of(query: SeriesQuery) -> list[str]:
    """The metric names the query covers (distinct, sorted)."""
    qs = Metric.objects.all()
    if query.key is None:
        qs = qs.filter(**{f"{query.owner_col}__isnull": False})
    else:
        qs = qs.filter(**{query.owner_col: query.key})
    if query.since is not None:
        qs = qs.filter(date__gt=query.since)
    if query.names:
        qs = qs.filter(name__in=query.names)
    return sorted(set(qs.values_list("name", flat=True).distinct()))
