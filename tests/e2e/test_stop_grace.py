"""How long `mlbench down` lets the run job end by itself (embedded/shutdown.job_grace):
the full grace only where the job can finish, a short one where Redis hangs (the
whole stop with Redis paused: tests/e2e/test_stop_everything.py)."""

import os
import signal

from mlbench_master.embedded.shutdown import (
    JOB_GRACE,
    JOB_GRACE_NO_REDIS,
    JOB_GRACE_UNMARKED,
    REDIS_PING_SECONDS,
    job_grace,
)
from mlbench_master.runs.jobqueue import answers
from tests.services import redis_server


def redis_answers(url: str | None) -> bool:
    """The question job_grace asks, within its ping's timeout."""
    return answers(url, REDIS_PING_SECONDS) if url else False


def _pid_on_port(url: str) -> int:
    import psutil

    port = int(url.rsplit(":", 1)[1].split("/")[0])
    for conn in psutil.net_connections("tcp"):
        if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN:
            return conn.pid
    raise AssertionError(f"nothing listens on {url}")


def test_a_paused_redis_shortens_the_jobs_grace_and_the_ping_is_bounded():
    with redis_server() as url:
        assert redis_answers(url) and job_grace(True, url) == JOB_GRACE
        pid = _pid_on_port(url)
        os.kill(pid, signal.SIGSTOP)  # alive, accepting connections, answering nobody
        try:
            assert not redis_answers(url)  # the ping's own timeout, not a hang
            assert job_grace(True, url) == JOB_GRACE_NO_REDIS
        finally:
            os.kill(pid, signal.SIGCONT)
        assert redis_answers(url)
    assert not redis_answers(url) and not redis_answers(None)  # gone; none known
    assert job_grace(False, None) == JOB_GRACE_UNMARKED
