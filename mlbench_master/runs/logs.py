"""Run logs: appended as numbered chunks, read by offset, bounded per run.

The orchestration job calls `append_output(run, lines, source)` as mpirun's output arrives
(`append_logs(run, entries)` takes chunks made elsewhere); the dashboard and the API read
`read_logs(run, offset=...)` and get only what is new. When a run's log exceeds
MLBENCH_LOG_MAX_BYTES the oldest chunks are dropped (the end of a log, where errors are,
is kept, its newest chunk always); readers see `truncated: true`.

Each line of a launch's output is stored once, whoever reads it and however often. A
launch's reader resumes from the offsets it saved after its last stored write (its
`checkpoint`), and that save is a second step after the database's commit: a job that dies
between the two (a killed RQ work horse) leaves the next reader to read that write's lines
again, and a job whose RQ worker died while its work horse lived on reads on beside the
job reconciliation started for the same run. So the store keeps its own record of how far
each source is stored, in the transaction that stores the lines, under the run row's
lock: `LogChunk.stored_to` on the newest chunk, {source: {stream: byte offset}}, and a
line that ends at or before that offset (`OutputLine.end`) is left out. Lines without a
position (the master's own notes) are always stored.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from django.conf import settings
from django.db import transaction

from mlbench_master.api.models import LogChunk, Run

if TYPE_CHECKING:
    from mlbench_master.cluster.base import OutputLine

STREAMS = ("stdout", "stderr")
PAGE = 1000
IMPORT_BATCH = 5000

Entry = tuple[int | None, str, str]  # (rank, stream, text): one chunk's worth
Marks = dict[str, dict[str, int]]  # source -> stream -> bytes of it stored


class Chunk(NamedTuple):
    """A stored log chunk as a bundle carries it: numbered and dated by its own master."""

    rank: int | None
    stream: str
    seq: int
    text: str
    created_at: dt.datetime


def append_logs(run: Run | int, entries: Iterable[Entry]) -> int:
    """Append (rank, stream, text) entries to a run's log; return the last seq stored.

    Safe to call from several processes: the run row is locked while numbering.
    """
    given = list(entries)
    return _append(run, lambda marks: (given, marks))


def append_output(run: Run | int, lines: Sequence[OutputLine], source: str | None) -> int:
    """Append output lines, consecutive lines of one rank and stream joined into a chunk,
    leaving out each line of `source` that is stored already; return the last seq stored."""
    return _append(run, lambda marks: unstored(lines, source, marks))


def unstored(
    lines: Sequence[OutputLine], source: str | None, marks: Marks
) -> tuple[list[Entry], Marks]:
    """The chunks of the `lines` not stored yet, and how far `source` is stored with them.

    A line of `source` with a position is stored when it ends past what is stored of its
    stream; a reader hands a stream's lines out in order, so what ends before is stored.
    """
    if source is None:
        return chunks(lines), marks
    reached = dict(marks.get(source, {}))
    new = []
    for line in lines:
        if line.end is not None:
            if line.end <= reached.get(line.stream, 0):
                continue
            reached[line.stream] = line.end
        new.append(line)
    return chunks(new), {**marks, source: reached}


def chunks(lines: Sequence[OutputLine]) -> list[Entry]:
    """(rank, stream, text) entries: runs of lines of one rank and stream joined."""
    entries: list[Entry] = []
    group: list[str] = []
    key: tuple[int | None, str] | None = None
    for line in lines:
        if (line.rank, line.stream) != key:
            if group and key is not None:
                entries.append((key[0], key[1], "\n".join(group) + "\n"))
            group = []
            key = (line.rank, line.stream)
        group.append(line.text)
    if group and key is not None:
        entries.append((key[0], key[1], "\n".join(group) + "\n"))
    return entries


def _append(run: Run | int, fresh: Callable[[Marks], tuple[list[Entry], Marks]]) -> int:
    """Store what `fresh(marks)` gives for the stored marks, with the marks it returns, in
    one transaction under the run row's lock (numbering, marks and bound move together)."""
    run_id = run if isinstance(run, int) else run.pk
    limit = settings.MLBENCH_LOG_MAX_BYTES
    with transaction.atomic():
        locked = Run.objects.select_for_update().only("pk", "log_bytes").get(pk=run_id)
        newest = (
            LogChunk.objects.filter(run_id=run_id)
            .order_by("-seq")
            .values_list("seq", "stored_to")
            .first()
        )
        last, marks = (newest[0], newest[1] or {}) if newest else (0, {})
        entries, marks = fresh(marks)
        rows = []
        added = 0
        for rank, stream, text in entries:
            if not text:
                continue
            text = text.replace("\x00", "")
            last += 1
            added += len(text)
            rows.append(
                LogChunk(
                    run_id=run_id,
                    rank=rank,
                    stream=stream if stream in STREAMS else "stdout",
                    seq=last,
                    text=text,
                )
            )
        if not rows:
            return last
        rows[-1].stored_to = marks or None  # the newest chunk carries them on
        LogChunk.objects.bulk_create(rows)
        total = locked.log_bytes + added
        if total > limit:
            total -= _drop_oldest(run_id, total - limit, newest=last)
        Run.objects.filter(pk=run_id).update(log_bytes=total)
        return last


def store_imported(run_id: int, chunks: Iterable[Chunk]) -> None:
    """Store an imported run's log as its master numbered and dated it, in batches (the
    caller's transaction makes it all or nothing; a chunk the reader refuses raises)."""
    batch: list[LogChunk] = []
    size = 0
    for chunk in chunks:
        text = chunk.text.replace("\x00", "")
        size += len(text.encode())
        batch.append(
            LogChunk(
                run_id=run_id,
                rank=chunk.rank,
                stream=chunk.stream,
                seq=chunk.seq,
                text=text,
                created_at=chunk.created_at,
            )
        )
        if len(batch) >= IMPORT_BATCH:
            LogChunk.objects.bulk_create(batch)
            batch = []
    LogChunk.objects.bulk_create(batch)
    Run.objects.filter(pk=run_id).update(log_bytes=size)


def _drop_oldest(run_id: int, excess: int, newest: int) -> int:
    """Delete the oldest chunks holding at least `excess` characters, never the `newest`
    (it holds the end of the log and how far it is stored); return how many characters."""
    removed, cutoff = 0, None
    for seq, text in (
        LogChunk.objects.filter(run_id=run_id, seq__lt=newest)
        .order_by("seq")
        .values_list("seq", "text")
    ).iterator(chunk_size=500):
        removed += len(text)
        cutoff = seq
        if removed >= excess:
            break
    if cutoff is not None:
        LogChunk.objects.filter(run_id=run_id, seq__lte=cutoff).delete()
    return removed


def read_logs(
    run: Run,
    offset: int = 0,
    rank: int | None = None,
    stream: str | None = None,
    limit: int = PAGE,
) -> dict[str, Any]:
    """Chunks with seq > offset (optionally one rank / stream), oldest first."""
    qs = LogChunk.objects.filter(run=run, seq__gt=offset).order_by("seq")
    if rank is not None:
        qs = qs.filter(rank=rank)
    if stream is not None:
        qs = qs.filter(stream=stream)
    chunks = list(qs.values("seq", "rank", "stream", "text", "created_at")[:limit])
    first = LogChunk.objects.filter(run=run).order_by("seq").values_list("seq", flat=True).first()
    return {
        "run_id": run.pk,
        "offset": offset,
        "next_offset": chunks[-1]["seq"] if chunks else offset,
        "truncated": first is not None and first > offset + 1,
        "chunks": chunks,
    }
