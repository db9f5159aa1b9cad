"""Run logs: appended as numbered chunks, read by offset, bounded per run.

The orchestration job calls `append_logs(run, entries)` as mpirun's output arrives; the
dashboard and the API read `read_logs(run, offset=...)` and get only what is new. When a
run's log exceeds MLBENCH_LOG_MAX_BYTES the oldest chunks are dropped (the end of a log,
where errors are, is kept); readers see `truncated: true`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any, NamedTuple

from django.conf import settings
from django.db import transaction
from django.db.models import Max

from mlbench_master.api.models import LogChunk, Run

STREAMS = ("stdout", "stderr")
PAGE = 1000
IMPORT_BATCH = 5000


class Chunk(NamedTuple):
    """A stored log chunk as a bundle carries it: numbered and dated by its own master."""

    rank: int | None
    stream: str
    seq: int
    text: str
    created_at: dt.datetime


def append_logs(run: Run | int, entries: Iterable[tuple[int | None, str, str]]) -> int:
    """Append (rank, stream, text) entries to a run's log; return the last seq stored.

    Safe to call from several processes: the run row is locked while numbering.
    """
    run_id = run if isinstance(run, int) else run.pk
    limit = settings.MLBENCH_LOG_MAX_BYTES
    with transaction.atomic():
        locked = Run.objects.select_for_update().only("pk", "log_bytes").get(pk=run_id)
        last = LogChunk.objects.filter(run_id=run_id).aggregate(m=Max("seq"))["m"] or 0
        chunks = []
        added = 0
        for rank, stream, text in entries:
            if not text:
                continue
            text = text.replace("\x00", "")
            last += 1
            added += len(text)
            chunks.append(
                LogChunk(
                    run_id=run_id,
                    rank=rank,
                    stream=stream if stream in STREAMS else "stdout",
                    seq=last,
                    text=text,
                )
            )
        if not chunks:
            return last
        LogChunk.objects.bulk_create(chunks)
        total = locked.log_bytes + added
        if total > limit:
            total -= _drop_oldest(run_id, total - limit)
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


def _drop_oldest(run_id: int, excess: int) -> int:
    """Delete the oldest chunks holding at least `excess` characters; return how many."""
    removed, cutoff = 0, None
    for seq, text in (
        LogChunk.objects.filter(run_id=run_id).order_by("seq").values_list("seq", "text")
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
