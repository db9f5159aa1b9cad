"""The run job's writer of mpirun's output: lines in, LogChunk rows out, batched.

Lines are written together at most every FLUSH_SECONDS (or FLUSH_LINES lines), so a
chatty run costs a few INSERTs a second, not one per line; `logs.append_output` joins
consecutive lines of one rank and stream into a chunk, numbers and bounds them, and leaves
out a line of the launch's output (`source`) that it holds already. After each successful
write the launch is told (`on_stored`) so a re-attached reader starts after what is stored
and loses nothing; should that news never arrive (the job dies in between), the lines it
reads again are not stored twice.

A database that cannot be reached (restarting, a network blip) does not end the run: the
lines stay pending and the next flush tries again on a fresh connection; the launch's
offsets only move once they are stored. `flush(patience=...)` waits for the database at
the end of a run, when no later flush would come.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable

from django.db import DatabaseError, IntegrityError, InterfaceError, OperationalError, connection

from mlbench_master.api.models import Run
from mlbench_master.cluster.base import OutputLine
from mlbench_master.runs.logs import append_output

FLUSH_SECONDS = 1.0  # log rows are written at least this often ...
FLUSH_LINES = 500  # ... or when this many lines are waiting
RETRY_SECONDS = 1.0  # how often flush(patience=...) tries an unreachable database again

log = logging.getLogger(__name__)


class LogWriter:
    """Stores one run's output lines; stops quietly once the run is deleted. `source` names
    the launch output the lines' offsets count in (`Execution.source`), None for lines
    without offsets."""

    def __init__(
        self,
        run_id: int,
        on_stored: Callable[[], None] | None = None,
        source: str | None = None,
    ) -> None:
        self.run_id = run_id
        self.on_stored = on_stored
        self.source = source
        self.pending: list[OutputLine] = []
        self.last_flush = time.monotonic()
        self.gone = False  # the run was deleted: nothing more to store
        self.unreachable = False  # the last write found the database unreachable

    def add(self, lines: list[OutputLine]) -> None:
        self.pending.extend(lines)
        if len(self.pending) >= FLUSH_LINES or (
            self.pending and time.monotonic() - self.last_flush >= FLUSH_SECONDS
        ):
            self.flush()

    def flush(self, patience: float = 0.0) -> bool:
        """Store the pending lines; True when none is left waiting.

        While the database is unreachable it tries again every RETRY_SECONDS for up to
        `patience` seconds (0: once; the next `add` tries again).
        """
        deadline = time.monotonic() + patience
        while not self._write() and time.monotonic() + RETRY_SECONDS <= deadline:
            time.sleep(RETRY_SECONDS)
        return not self.pending or self.gone

    def _write(self) -> bool:
        """One attempt; False when the database could not be reached (lines kept)."""

        self.last_flush = time.monotonic()
        if not self.pending or self.gone:
            return True
        try:
            append_output(self.run_id, self.pending, self.source)
        except (Run.DoesNotExist, IntegrityError):
            self.gone = True  # deleted while it ran (DELETE cancels, then removes the row)
            self.pending = []
            return True
        except (OperationalError, InterfaceError) as exc:
            if not self.unreachable:
                log.warning(
                    "run %s: output not stored, the database is unreachable (%s); "
                    "keeping it and trying again",
                    self.run_id,
                    str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                )
            self.unreachable = True
            drop_connection()
            return False
        self.pending = []
        if self.unreachable:
            log.warning("run %s: the database answers again; pending output stored", self.run_id)
            self.unreachable = False
        if self.on_stored is not None:
            self.on_stored()
        return True


def drop_connection() -> None:
    """Close this thread's database connection, which the outage may have cut: Django keeps
    using a broken connection until it is closed, and reconnects on the next query."""
    with contextlib.suppress(DatabaseError):
        connection.close()
