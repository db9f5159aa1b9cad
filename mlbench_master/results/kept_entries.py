"""The results board's entries kept in the database (`StoredEntry`, results/models.py), so
that a read of the board makes only the entries whose runs changed.

How a read finds what is current, in two queries however many entries: every run of the
board with its kept result's version (one query: the runs' ids, series, worker counts and
states, and api_storedresult's version), grouped into entries as the board groups them;
then every kept entry of those tasks with the signature it was made at (its runs' ids and
versions, and the code: kept_runs.CODE). An entry is current where the two signatures are
equal: the same runs at the same versions, and every change to a run raises its version
(results/models.py). The others are made (board_entry.make) and kept, where every run of
the entry has ended (an entry with a run still active or queued changes with it: it is
made at each read). An entry whose runs no longer make it (they were deleted, or joined a
series) is dropped when the next ones are kept.

The entry's sections, filter and ranking fields are columns, read with the signature; its
body (numbers, cost, links, runs: most of its bytes) and convergence inputs are read only
for the entries an answer holds (`with_bodies`), so a page of the board reads fifty bodies
of ten thousand entries. Off PostgreSQL nothing is kept: every read makes every entry.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass

from django.db import connection
from django.db.models import Q

from mlbench_master.api.models import Run
from mlbench_master.bundles import origins
from mlbench_master.results import board_entry, kept_runs
from mlbench_master.results.board_entry import HEAD, GroupKey, Made


@dataclass
class Entry:
    """A current entry of the board: its group, its runs (where it was made by this read)
    and the entry (its body and convergence inputs empty until `with_bodies` reads them)."""

    group: GroupKey
    runs: list[int]
    made: Made


FINAL = list(Run.FINAL_STATES)
_RUNS = """
SELECT r.id, r.series_id, r.num_workers, r.state
FROM api_run r WHERE NOT (r.task = ANY(%s::varchar[])) {task}
ORDER BY r.id
"""
COLUMNS = ("key", "task", "signature", *HEAD, "seeds", "unranked", "origin_key",
           "origin_fingerprint")  # fmt: skip
# The board's groups (board_entry.groups_of, made by PostgreSQL: a series' runs with one
# worker count, a lone run once ended) with their signatures, whether they may be kept (every
# run ended) and the kept entry's fields where its signature is the group's: one row an
# entry, in the order of their first run.
_CURRENT = f"""
WITH groups AS (
    SELECT CASE WHEN r.series_id IS NULL THEN 'run-' || r.id
                ELSE 'series-' || r.series_id || '-x' || r.num_workers END AS key,
           CASE WHEN r.series_id IS NULL THEN r.id ELSE r.series_id END AS owner,
           r.series_id IS NULL AS lone, r.num_workers,
           array_agg(r.id ORDER BY r.id) AS runs, min(r.id) AS first,
           %s || '|' || string_agg(r.id || ':' || coalesce(s.version::text, 'None'), ','
                                   ORDER BY r.id) AS signature,
           bool_and(r.state = ANY(%s::varchar[]) AND s.version IS NOT NULL) AS keep
    FROM api_run r LEFT JOIN api_storedresult s ON s.run_id = r.id
    WHERE NOT (r.task = ANY(%s::varchar[])) {{task}}
          AND (r.series_id IS NOT NULL OR r.state = ANY(%s::varchar[]))
    GROUP BY 1, 2, 3, 4
),
board AS (
    SELECT md5(coalesce(string_agg(key || '=' || signature, ';' ORDER BY first), '')) AS digest
    FROM groups
)
SELECT NULL, NULL, NULL, NULL, digest, NULL, {", ".join(["NULL"] * len(COLUMNS))}, -1 AS first
FROM board
UNION ALL
SELECT g.lone, g.owner, g.num_workers, CASE WHEN e.key IS NULL THEN g.runs END,
       CASE WHEN e.key IS NULL THEN g.signature END, g.keep AND e.key IS NULL,
       {", ".join(f"e.{c}" for c in COLUMNS)}, g.first
FROM groups g LEFT JOIN api_storedentry e ON e.key = g.key AND e.signature = g.signature
WHERE (SELECT digest FROM board) IS DISTINCT FROM %s
ORDER BY first
"""
_BODIES = "SELECT key, body, conv FROM api_storedentry WHERE key = ANY(%s::varchar[])"
# Entries of the task no group makes now (their runs were deleted or joined a series).
_DROP = "DELETE FROM api_storedentry WHERE {task} NOT (key = ANY(%s::varchar[]))"
_KEEP = f"""
INSERT INTO api_storedentry ({", ".join(COLUMNS)}, body, conv)
VALUES ({", ".join(["%s"] * (len(COLUMNS) + 2))})
ON CONFLICT (key) DO UPDATE SET {", ".join(f"{c} = EXCLUDED.{c}" for c in COLUMNS[1:])},
    body = EXCLUDED.body, conv = EXCLUDED.conv
"""


def read(
    task: str | None, measurements: Sequence[str], fresh: bool = False, known: str | None = None
) -> tuple[str | None, list[Entry] | None]:
    """The board's current entries of `task` (None: every task), measurements' runs left
    out, in the order of their first run, with the board's digest (of its entries' ids and
    signatures); none where the digest is `known`: nothing changed since the read that
    gave it. `fresh`: every entry made now, nothing kept (as where nothing is kept: off
    PostgreSQL), and no digest."""
    if fresh or not kept_runs.available():
        return None, _fresh(task, measurements)
    where = "AND r.task = %s" if task else ""
    args = [kept_runs.CODE, FINAL, list(measurements), *([task] if task else []), FINAL, known]
    with connection.cursor() as cursor:
        cursor.execute(_CURRENT.format(task=where), args)
        rows = cursor.fetchall()
    digest = rows[0][4]
    if digest == known:
        return digest, None
    found, stale, keep = [], {}, {}
    heads = slice(6 + 3, 6 + 3 + len(HEAD))
    for row in rows[1:]:
        lone, owner, workers, runs, signature, keepable = row[:6]
        group: GroupKey = ("run" if lone else "series", owner, workers)
        if row[6] is None:  # no kept entry of this signature
            stale[group] = runs
            if keepable:
                keep[group] = signature
            found.append(Entry(group, runs, None))  # type: ignore[arg-type]
            continue
        key, entry_task = row[6], row[7]
        seeds, unranked, origin_key, origin_fingerprint = row[heads.stop : heads.stop + 4]
        made = Made(key, entry_task, dict(zip(HEAD, row[heads], strict=True)), seeds, unranked,
                    origin_key, origin_fingerprint, "", {})  # fmt: skip
        found.append(Entry(group, [], made))
    if stale:
        made = _make(stale)
        _keep([(made[g], signature) for g, signature in keep.items() if g in made], task,
              [board_entry.entry_id(e.group) for e in found])  # fmt: skip
        for entry in found:
            if entry.made is None and entry.group in made:
                # A kept entry's body is read again when answered (with_bodies): the
                # ranked board board.py holds between reads keeps no bodies of its own.
                entry.made = made[entry.group]
                if entry.group in keep:
                    entry.made = dataclasses.replace(entry.made, body="", conv={})
    return digest, [e for e in found if e.made is not None]


def _fresh(task: str | None, measurements: Sequence[str]) -> list[Entry]:
    where = "AND r.task = %s" if task else ""
    with connection.cursor() as cursor:
        cursor.execute(_RUNS.format(task=where), [list(measurements), *([task] if task else [])])
        groups = board_entry.groups_of(cursor.fetchall())
    made = _make(groups)
    return [Entry(key, groups[key], made[key]) for key in groups if key in made]


def with_bodies(entries: Sequence[Entry]) -> dict[str, Made]:
    """`entries` by id with their bodies and convergence inputs: read in one query where an
    entry holds none (it was read kept), a copy (the entries may be shared by other reads:
    board.py keeps the ranked ones). An entry dropped meanwhile by another reader is made
    again; one whose runs are gone is left out."""
    out = {e.made.id: e.made for e in entries if e.made.body}
    wanted = {e.made.id: e for e in entries if not e.made.body}
    if not wanted:
        return out
    with connection.cursor() as cursor:
        cursor.execute(_BODIES, [list(wanted)])
        for key, body, conv in cursor.fetchall():
            out[key] = dataclasses.replace(wanted[key].made, body=body, conv=json.loads(conv))
    lost = [e.group for key, e in wanted.items() if key not in out]
    if lost:
        for made in _make(_members(lost)).values():
            out[made.id] = made
    return out


def _members(groups: list[GroupKey]) -> dict[GroupKey, list[int]]:
    """The runs of `groups` now (one query)."""
    series = [g[1] for g in groups if g[0] == "series"]
    lone = [g[1] for g in groups if g[0] == "run"]
    rows = Run.objects.filter(Q(series_id__in=series) | Q(pk__in=lone, series=None))
    found = board_entry.groups_of(
        rows.order_by("id").values_list("id", "series_id", "num_workers", "state")
    )
    return {g: found.get(g, []) for g in groups}


def _make(groups: dict[GroupKey, list[int]]) -> dict[GroupKey, Made]:
    """The entries of `groups` made from their runs, read now (with their origins)."""
    ids = [pk for members in groups.values() for pk in members]
    runs = {r.pk: r for r in origins.with_origins(Run.objects.filter(pk__in=ids).order_by("id"))}
    present = {key: [runs[pk] for pk in members if pk in runs] for key, members in groups.items()}
    return board_entry.make({key: members for key, members in present.items() if members})


def _keep(made: list[tuple[Made, str]], task: str | None, current: list[str]) -> None:
    """Keep `made` (each with its signature) and drop the entries of `task` (None: of every
    task) that no group of `current` makes now."""
    rows = []
    for entry, signature in made:
        values = {"key": entry.id, "task": entry.task, "signature": signature, **entry.head,
                  "seeds": entry.seeds, "unranked": entry.unranked,
                  "origin_key": entry.origin_key,
                  "origin_fingerprint": entry.origin_fingerprint}  # fmt: skip
        rows.append([values[c] for c in COLUMNS] + [entry.body, board_entry.dumps(entry.conv)])
    with connection.cursor() as cursor:
        where = "task = %s AND" if task else ""
        cursor.execute(_DROP.format(task=where), [*([task] if task else []), current])
        if rows:
            cursor.executemany(_KEEP, rows)
