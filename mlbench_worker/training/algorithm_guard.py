"""The trainer's watch over the algorithm it runs: failures named, stalls ended, claims checked.

Why: an algorithm from outside mlbench (algorithms/registry.py) runs inside every rank's
loop. When it raises, the run must end FAILED with the algorithm's module, line and message,
not a traceback deep in the trainer; when it deadlocks (one rank calls a collective the
others never make) or its ranks hand collectives buffers of different sizes, every rank would
wait forever: the watchdog ends the job, naming the algorithm, the call and the step; and
when it says how many bytes it sends (`claimed_bytes`), the claim is reported beside what
the trainer's wire measured, never instead of it.

Each algorithm call goes through `call` (a few attribute writes and a clock read: noise
beside any step, measured by tests/benchmarks/bench_algorithm_guard.py). The watchdog is a
daemon thread that looks every half second whether the call in progress has lasted longer
than the limit: max(--algorithm-stall-seconds, 20 x the slowest step so far), so a slow but
honest step never trips it. It is on for outside algorithms (default 120 s), and for
built-ins only when --algorithm-stall-seconds is given (a built-in's all-reduce over a link
limited to a few Mbit/s may honestly take minutes).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from mlbench_worker.shared import metric_points as points
from mlbench_worker.training.entry import RankFailed

DEFAULT_STALL_SECONDS = 120.0
STALL_FACTOR = 20.0
CLAIMED = points.declared("claimed_comm_bytes")


class Guard:
    """One rank's watch over algorithm `name` (from `path`, its file; None: a built-in)."""

    def __init__(
        self,
        name: str,
        rank: int,
        abort: Callable[[int], None],
        stall_seconds: float | None = None,
        path: str | None = None,
    ) -> None:
        self.name, self.rank, self.abort, self.path = name, rank, abort, path
        self.stall_seconds = stall_seconds
        self.phase: str | None = None  # the call in progress
        self.since = 0.0  # when it began (perf_counter)
        self.step = 0  # the step it belongs to (1-based)
        self.slowest = 0.0  # the slowest whole step so far, seconds
        self.claimed = 0.0  # claimed bytes since the last report
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if stall_seconds is not None:
            self._thread = threading.Thread(target=self._watch, daemon=True, name="stall-watch")
            self._thread.start()

    def limit(self) -> float:
        """Seconds a call may last before it is a stall."""
        return max(self.stall_seconds or DEFAULT_STALL_SECONDS, STALL_FACTOR * self.slowest)

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)`, one of the algorithm's methods, watched and named if it raises."""
        self.phase, self.since = fn.__name__, time.perf_counter()
        try:
            return fn(*args)
        except Exception as exc:  # the algorithm's own failure, whatever it is
            raise RankFailed(self.failure(exc)) from exc
        finally:
            self.phase = None

    def failure(self, exc: BaseException) -> str:
        """The sentence a run that failed in the algorithm ends with."""
        from mlbench_worker.algorithms.registry import failure

        return (
            f"algorithm {self.name} raised in {self.phase}() at step {self.step} "
            f"(rank {self.rank}): {failure(exc, self.path)}"
        )

    def step_done(self, seconds: float, claimed: int | None) -> None:
        """A step of `seconds` is over; `claimed`: the bytes the algorithm says it sent."""
        if seconds > self.slowest:
            self.slowest = seconds
        if claimed is not None:
            self.claimed += claimed

    def report_claim(self, reporter: Any, meta: dict, claimed: float, measured: float,
                     say: Callable[[str], None]) -> None:  # fmt: skip
        """Rank 0: post the mean claim per step beside the measured count; say a difference."""
        reporter.metric(CLAIMED, float(claimed), **meta)
        if abs(claimed - measured) > 0.5:
            say(
                f"algorithm {self.name} claims {claimed:,.0f} bytes/step; the trainer measured "
                f"{measured:,.0f} (comm_bytes reports the measured count)"
            )

    def close(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.wait(0.5):
            phase = self.phase
            if phase is None:
                continue
            waited = time.perf_counter() - self.since
            if waited > self.limit() and self.phase == phase:
                self._end(phase, waited)
                return

    def _end(self, phase: str, waited: float) -> None:
        """Say the stall and end every rank of the job (this one last)."""
        print(
            f"mlbench-worker: error: algorithm {self.name} stalled in {phase}() at step "
            f"{self.step} on rank {self.rank}: no progress for {waited:.0f} s (limit "
            f"{self.limit():.0f} s, --algorithm-stall-seconds). A rank waits in a collective "
            "the others did not make, or the ranks gave it buffers of different sizes",
            file=sys.stderr,
            flush=True,
        )
        try:
            self.abort(1)
        finally:
            os._exit(1)
