"""The run job's writer of mpirun's output: lines in, LogChunk rows out, batched.

Consecutive lines of the same rank and stream become one chunk, and chunks are written
together at most every FLUSH_SECONDS (or FLUSH_LINES lines), so a chatty run costs a few
INSERTs a second, not one per line. `api.logs.append_logs` numbers and bounds them. After
each successful write the launch is told (`on_stored`) so a re-attached reader starts
after what is stored and loses nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from mlbench_master.cluster.base import OutputLine

FLUSH_SECONDS = 1.0  # log rows are written at least this often ...
FLUSH_LINES = 500  # ... or when this many lines are waiting


class LogWriter:
    """Stores one run's output lines; stops quietly once the run is deleted."""

    def __init__(self, run_id: int, on_stored: Callable[[], None] | None = None) -> None:
        self.run_id = run_id
        self.on_stored = on_stored
        self.pending: list[OutputLine] = []
        self.last_flush = time.monotonic()
        self.gone = False  # the run was deleted: nothing more to store

    def add(self, lines: list[OutputLine]) -> None:
        self.pending.extend(lines)
        if len(self.pending) >= FLUSH_LINES or (
            self.pending and time.monotonic() - self.last_flush >= FLUSH_SECONDS
        ):
            self.flush()

    def flush(self) -> None:
        from django.db import IntegrityError

        from mlbench_master.api.logs import append_logs
        from mlbench_master.api.models import Run

        self.last_flush = time.monotonic()
        lines, self.pending = self.pending, []
        if not lines or self.gone:
            return
        try:
            append_logs(self.run_id, chunks(lines))
        except (Run.DoesNotExist, IntegrityError):
            self.gone = True  # deleted while it ran (DELETE cancels, then removes the row)
            return
        if self.on_stored is not None:
            self.on_stored()


def chunks(lines: list[OutputLine]) -> list[tuple[int | None, str, str]]:
    """(rank, stream, text) entries: runs of lines of one rank and stream joined."""
    entries: list[tuple[int | None, str, str]] = []
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
