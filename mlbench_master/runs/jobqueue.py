"""The "runs" queue on Redis, through django-rq: putting a run's job on it, taking it off,
and telling which jobs live RQ workers are executing.

One module owns the queue so the rest of the master never builds Redis connections or RQ
objects itself. Connections carry short timeouts: with Redis down an API request or a
reconciliation must fail within seconds with a reason, not hang.
"""

from __future__ import annotations

import datetime as dt
import logging
import socket
from typing import Any

import psutil
import redis
from django.conf import settings
from rq import Worker
from rq.exceptions import InvalidJobOperation, NoSuchJobError
from rq.job import Job, JobStatus

log = logging.getLogger(__name__)

RUN_JOB = "mlbench_master.runs.jobs.run_job"
RUN_QUEUE = "runs"
KEEP_RESULTS = 7 * 24 * 3600  # seconds RQ keeps a finished or failed job's record
FRESH_HEARTBEAT = 90.0  # an RQ worker silent longer than this is not alive


class QueueError(Exception):
    """Redis could not be reached; the message says where (never with a password)."""


def redis_url() -> str:
    return settings.RQ_QUEUES.get(RUN_QUEUE, {}).get("URL", settings.REDIS_URL)


def location() -> str:
    """Where Redis is, for messages (host:port/db, never a password)."""
    return redis_url().split("@")[-1]


def connection(url: str | None = None, timeout: float = 10.0) -> Any:
    """A client of the master's Redis (or of `url`), waiting at most `timeout` s an answer."""
    return redis.Redis.from_url(
        url or redis_url(), socket_connect_timeout=min(3.0, timeout), socket_timeout=timeout
    )


def enqueue_run_job(run_id: int, timeout: int, description: str) -> str:
    """Put `run_job(run_id)` on the runs queue; its id. QueueError when Redis fails."""
    # django_rq reads Django's settings as it loads: `mlbench_master down` and the embedded
    # supervisor load this module before the settings they start with are final.
    import django_rq

    try:
        job = django_rq.get_queue(RUN_QUEUE, connection=connection()).enqueue_call(
            RUN_JOB,
            args=(run_id,),
            timeout=timeout,
            result_ttl=KEEP_RESULTS,
            failure_ttl=KEEP_RESULTS,
            description=description,
        )
    except (redis.exceptions.RedisError, OSError) as exc:
        raise QueueError(f"Redis at {location()} is unreachable ({exc})") from exc
    return job.id


def drop_if_queued(job_id: str) -> None:
    """Remove a job no worker has taken yet (a run cancelled before it started)."""
    if not job_id:
        return
    try:
        job = Job.fetch(job_id, connection=connection())
        if job.get_status() in (JobStatus.QUEUED, JobStatus.DEFERRED, JobStatus.SCHEDULED):
            job.cancel()
    except (NoSuchJobError, InvalidJobOperation):
        pass
    except Exception as exc:  # Redis down: the job finds the run CANCELLED when it runs
        log.warning("could not drop RQ job %s: %s", job_id, exc)


def jobs_in_progress(fresh_seconds: float = FRESH_HEARTBEAT) -> set[str]:
    """Ids of the jobs live RQ workers are executing now.

    A worker that died without saying so stays registered until its key expires; one whose
    last heartbeat (every 30 s while it works) is older than `fresh_seconds` is not live,
    nor is one on this machine whose process no longer exists (a fresh heartbeat says
    nothing when the worker was SIGKILLed a second ago), or whose pid now belongs to a
    process born after the worker registered: a restarted container's new worker is pid 1
    again, and taking the dead one for it kept its run's job "in progress" for 90 s.
    """
    try:
        now = dt.datetime.now(dt.UTC)
        busy = set()
        for worker in Worker.all(connection=connection()):
            job_id = worker.get_current_job_id()
            beat = worker.last_heartbeat
            if beat is not None and beat.tzinfo is None:
                beat = beat.replace(tzinfo=dt.UTC)
            if not job_id or beat is None or (now - beat).total_seconds() >= fresh_seconds:
                continue
            if worker.hostname == socket.gethostname() and not _pid_alive(
                worker.pid, worker.birth_date
            ):
                continue
            busy.add(job_id)
        return busy
    except Exception:  # Redis down: nothing is in progress anywhere
        return set()


def answers(url: str | None = None, timeout: float = 10.0) -> bool:
    """Whether Redis (the master's, or `url`) answers a PING within `timeout` seconds. When
    it does not, `jobs_in_progress` cannot tell a live job from a dead one (it answers
    "none"), so nothing may be concluded from it."""
    try:
        return bool(connection(url, timeout).ping())
    except Exception:  # noqa: BLE001 - unreachable, refused, timed out: all mean "no"
        return False


def job_waiting(job_id: str) -> bool:
    """Whether the job is queued (or popped by a worker that has not marked it started)."""
    try:
        status = Job.fetch(job_id, connection=connection()).get_status()
        return status in (JobStatus.QUEUED, JobStatus.DEFERRED, JobStatus.SCHEDULED)
    except Exception:  # no such job, or Redis down
        return False


# A worker registers a moment after its process starts; a process at its pid that started
# later than this after the registration is another one. Generous: a process's start time
# is counted from the boot time, which can be a second or two off the wall clock.
BIRTH_SLACK_SECONDS = 5.0


def _pid_alive(pid: int | None, registered: dt.datetime | None = None) -> bool:
    """Whether the process `pid` lives and, given when the worker registered, is old enough
    to be that worker (not a newer process that got its pid)."""
    if not pid:
        return False
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
    except Exception:  # noqa: BLE001 - no such process (or not readable: assume gone)
        return False
    if registered is None:
        return True
    if registered.tzinfo is None:
        registered = registered.replace(tzinfo=dt.UTC)
    return proc.create_time() <= registered.timestamp() + BIRTH_SLACK_SECONDS
