"""One job watches a run at a time: a lock per run that lives exactly as long as the job.

Why not Redis: which job an RQ worker executes is known to Redis alone. A Redis restart
forgets it, and an RQ worker that quits (its heart beat fell in a Redis outage, or it was
killed) leaves its work horse, in a process group of its own, watching the run. Asked
"does a live job watch this run?", Redis said no, reconciliation queued the run's job
again, and two jobs watched one launch: both read its output, both ended the run, both
stopped its processes. So the run job holds a lock for its run that its own process holds,
which the system drops when that process dies, at any point, with no timeout to guess:

- PostgreSQL: a session advisory lock (``pg_try_advisory_lock``) on the job's own
  database connection. The server drops it when the session ends: the process died (the
  kernel closes its socket) or the connection was cut. Every write the job makes goes
  through that connection, so it is made by the lock's holder. When the connection is
  renewed (after a PostgreSQL restart) the new one takes the lock again before anything
  uses it; if another job holds it by then, the connection is closed and `WatchLost`
  raised, and the job leaves the run to the other without writing anything more.
- SQLite (an embedded master: one machine): an ``flock`` on a file beside the database,
  which the kernel drops with the process. The holder writes its pid and start time in
  it, so that reconciliation can ask without taking the lock.

`hold(run_id)` is what the job takes first (False: another job watches the run, and this
one leaves at once); `watched(run_id)` is what reconciliation asks before it queues a
run's job again, and it only reads.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.db.backends.signals import connection_created

log = logging.getLogger(__name__)

# The first key of every run's advisory lock ("mlbw"); the second is the run's id (PostgreSQL
# takes two int4 keys: ids 2**31 apart share a lock, which would only make a job wait).
LOCK_CLASS = 0x6D6C6277
WATCH_FOLDER = "run-watch"  # beside an SQLite database: one lock file per run


class WatchLost(Exception):
    """The job's database session ended and another job holds the run's lock now: this job
    must leave the run (its launch, its output, its end) to that one."""


def lock_key(run_id: int) -> tuple[int, int]:
    return LOCK_CLASS, int(run_id) % 2**31


@contextlib.contextmanager
def hold(run_id: int) -> Iterator[bool]:
    """Take `run_id`'s watch lock for the block; yields False (and holds nothing) when
    another live job holds it. Released at the end of the block, or by the process's death."""
    lock = _AdvisoryLock(run_id) if _on_postgresql() else FileLock(_folder(), run_id)
    if not lock.acquire():
        yield False
        return
    try:
        yield True
    finally:
        lock.release()


def watched(run_id: int) -> bool:
    """Whether a live job holds `run_id`'s watch lock; takes nothing."""
    if _on_postgresql():
        with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
            cursor.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"
                " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
                " AND classid::bigint = %s AND objid::bigint = %s AND objsubid = 2)",
                lock_key(run_id),
            )
            return bool(cursor.fetchone()[0])
    return file_holder_alive(_folder() / f"run-{int(run_id)}.lock")


def _on_postgresql() -> bool:
    return connections[DEFAULT_DB_ALIAS].vendor == "postgresql"


def _folder() -> Path:
    name = str(settings.DATABASES[DEFAULT_DB_ALIAS].get("NAME") or "")
    if not name or name.startswith(":memory:") or name.startswith("file:"):
        return Path(settings.MLBENCH_HOME) / WATCH_FOLDER
    return Path(name).resolve().parent / WATCH_FOLDER


class _AdvisoryLock:
    """The run's advisory lock on this thread's connection, taken again on every new one."""

    def __init__(self, run_id: int) -> None:
        self.run_id = run_id
        self.thread = threading.get_ident()

    def acquire(self) -> bool:
        if not _try_advisory(connections[DEFAULT_DB_ALIAS], self.run_id):
            return False
        connection_created.connect(self._take_again, weak=False)
        return True

    def _take_again(self, sender: Any, connection: Any, **_: Any) -> None:
        """A new connection of the holding thread holds the lock before it is used."""
        if connection.alias != DEFAULT_DB_ALIAS or threading.get_ident() != self.thread:
            return
        try:
            taken = _try_advisory(connection, self.run_id)
        except BaseException:
            connection.close()  # never left open without the lock
            raise
        if taken:
            log.warning("run %s: new database connection; the run's watch lock held again",
                        self.run_id)  # fmt: skip
            return
        connection.close()
        raise WatchLost(
            f"run {self.run_id}: this job's database session ended and another job holds "
            "the run's watch lock now; this job leaves the run to it"
        )

    def release(self) -> None:
        connection_created.disconnect(self._take_again)
        conn = connections[DEFAULT_DB_ALIAS]
        if conn.connection is None:
            return  # closed: the session, and the lock with it, is gone
        try:
            with conn.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", lock_key(self.run_id))
        except DatabaseError:
            conn.close()  # a cut session holds nothing; closing it makes sure


def _try_advisory(connection: Any, run_id: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", lock_key(run_id))
        return bool(cursor.fetchone()[0])


class FileLock:
    """An flock on `folder`/run-<id>.lock, the holder's pid and start time written in it."""

    def __init__(self, folder: Path, run_id: int) -> None:
        self.path = folder / f"run-{int(run_id)}.lock"
        self.fd: int | None = None

    def acquire(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)  # not inherited by children
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        me = psutil.Process()
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{me.pid} {me.create_time()!r}\n".encode(), 0)
        self.fd = fd
        return True

    def release(self) -> None:
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            os.close(self.fd)  # drops the flock
            self.fd = None


def file_holder_alive(path: Path) -> bool:
    """Whether the process named in lock file `path` lives (the same process: same start
    time, not a newer one that got its pid). The kernel drops the flock when the holder
    dies, so a live holder still holds it; an empty or missing file has none."""
    try:
        pid_text, born_text = path.read_text().split()
        proc = psutil.Process(int(pid_text))
        alive = proc.status() != psutil.STATUS_ZOMBIE
        return alive and proc.create_time() == float(born_text)
    except (OSError, ValueError, psutil.Error):
        return False
