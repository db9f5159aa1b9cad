"""A Kubernetes launch as the job sees it: mpirun's output read from the files in pod 0,
its exit code from the file its wrapper writes (detach.py has the pod side).

The same contract as the local driver's: bytes are handed out as whole lines, and
`checkpoint` (called once they are stored) saves how far the files were read, next to
them in the pod, so a master that re-attaches reads on from there: no line lost or stored
twice. The offsets live in the pod rather than in the run's launch record because the job
stores that record once, at launch, and drivers never write to the database; and because
they describe those files, they go when the files go (a replaced pod 0 leaves no offsets
that would point into someone else's output).

One exec session streams the output for as long as the launch runs; the offsets travel
over its stdin, so saving them costs no request of its own. Nothing acknowledges a save:
if the master dies between storing lines and the save reaching the pod, the next one
reads those lines again (one write's worth at most); it never misses any. It does not
store them again: each line carries where it ends in its file (`OutputLine.end`, within
the launch's `source`), and the log's store leaves out what it holds already
(runs/logs.py, in the transaction that stores the lines). A dropped session (a proxy in
front of the API server that ends long connections, an API server restart) is opened
again from the offsets; only the loss of pod 0 ends the run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from mlbench_master.cluster.base import ClusterError, Execution, OutputLine
from mlbench_master.cluster.kubernetes import detach, losses
from mlbench_master.cluster.kubernetes.podexec import LOST, ExecChannel
from mlbench_master.cluster.mpirun import parse_line

log = logging.getLogger(__name__)

STREAMS = ("stdout", "stderr")
KILLED = 128 + 9  # reported like a shell reports SIGKILL, as the local driver does
# Consecutive failures to read pod 0's files (its pod still there) before the run ends.
MAX_FAILURES = 5
# How long kill() waits for the output of the stopped processes.
DRAIN_SECONDS = 5.0
# Seconds a kubelet may take to tell the API server that a container ended: a launch that
# failed with no worker pod lost is looked at once more after them (a rank's pod restarted
# for memory can end mpirun before the API has heard of it).
KUBELET_LAG = 2.0


@dataclass(frozen=True)
class Launch:
    """Where a launch lives: pod 0 (and which incarnation of it), its directory, its marker."""

    pod: str
    pod_uid: str
    directory: str
    launch_id: str

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Launch | None:
        """The launch a run's stored record names; None for a record without one (a launch
        by a master from before detached launches, whose output went over its exec session)."""
        where = (record or {}).get("kubernetes") or {}
        if not (where.get("launcher") and where.get("dir") and where.get("launch_id")):
            return None
        return cls(
            pod=str(where["launcher"]),
            pod_uid=str(where.get("launcher_uid") or ""),
            directory=str(where["dir"]),
            launch_id=str(where["launch_id"]),
        )

    def fields(self) -> dict[str, str]:
        """This launch's part of the record's "kubernetes" entry."""
        return {
            "launcher": self.pod,
            "launcher_uid": self.pod_uid,
            "dir": self.directory,
            "launch_id": self.launch_id,
        }


class PodAccess(Protocol):
    """What an execution needs of the driver."""

    def channel(self, pod: str, command: list[str], *, binary: bool = False) -> ExecChannel:
        """Start `command` in the pod's worker container."""

    def run_in_pod(self, pod: str, command: list[str], timeout: float = ...) -> tuple[int, str]:
        """Run a short command; (exit code, output)."""

    def launcher_lost(self, launch: Launch) -> str | None:
        """Why pod 0 of `launch` no longer holds it (gone, replaced, stopped); None if it does."""

    def workers_lost(self, recorded: Any, launcher: str = "") -> str | None:
        """Which worker pods of the launch record's note were lost since (losses.py)."""


class PodFilesExecution(Execution):
    """A detached mpirun in pod 0, read through its output files."""

    def __init__(
        self,
        pods: PodAccess,
        launch: Launch,
        *,
        offsets: tuple[int, int] = (0, 0),
        record: dict[str, Any] | None = None,
        on_kill: Callable[[], None] = lambda: None,
        on_exit: Callable[[], None] = lambda: None,
    ) -> None:
        self.launch = launch
        self._pods = pods
        self._record = dict(record or {})
        self._on_kill = on_kill
        self._on_exit = on_exit
        self._offsets = dict(zip(STREAMS, offsets, strict=True))  # bytes received
        self._handed = dict(self._offsets)  # bytes of the complete lines handed out
        self._partial = {s: b"" for s in STREAMS}
        self._ready: list[OutputLine] = []  # lines read, not handed out yet
        self._ready_handed = dict(self._handed)
        self._stream: ExecChannel | None = None
        self._failures = 0
        self._retry_at = 0.0
        self._code: int | None = None
        self._exit_known = True
        self._killing = False
        self._end_reason: str | None = None

    @property
    def record(self) -> dict[str, Any]:
        return self._record

    @property
    def exit_known(self) -> bool:
        return self._exit_known

    def end_reason(self) -> str | None:
        """The worker pods the launch lost, when it failed and Kubernetes says some were
        lost or had their container end: the first cause, before the ranks' reports."""
        return self._end_reason

    # -- reading ----------------------------------------------------------------------------

    def read(self, timeout: float) -> list[OutputLine]:
        if not self._ready and self._code is None:
            self._pull(timeout)
        lines, self._ready = self._ready, []
        self._handed = dict(self._ready_handed)
        return lines

    def poll(self) -> int | None:
        return self._code if self._code is not None and not self._ready else None

    def _pull(self, timeout: float) -> None:
        """Read what came within `timeout` into the ready lines; notice the end."""
        if self._stream is None:
            wait = self._retry_at - time.monotonic()
            if wait > 0:
                time.sleep(min(wait, timeout))
                return
            try:
                self._stream = self._pods.channel(
                    self.launch.pod,
                    detach.stream(
                        self.launch.directory,
                        self.launch.launch_id,
                        self._offsets["stdout"],
                        self._offsets["stderr"],
                    ),
                    binary=True,
                )
            except ClusterError as error:
                self._failed(str(error))
                return
        stream = self._stream
        for name, data in stream.read(timeout):
            if data:
                self._failures = 0
                self._take(name, data if isinstance(data, bytes) else data.encode())
        if stream.done():
            code, reason = stream.status()
            self._close_stream()
            if code == 0:
                self._ended()
            else:
                self._failed(reason or f"the output stream exited with code {code}")

    def _take(self, stream: str, data: bytes) -> None:
        end = self._offsets[stream] - len(self._partial[stream])  # where the first begins
        self._offsets[stream] += len(data)
        *complete, rest = (self._partial[stream] + data).split(b"\n")
        self._partial[stream] = rest
        for raw in complete:
            end += len(raw) + 1
            self._ready.append(replace(parse_line(raw.decode("utf-8", "replace"), stream), end=end))
        self._ready_handed[stream] = self._offsets[stream] - len(rest)

    def _ended(self) -> None:
        """The stream read both files to their end after the launch ended (or lost its
        leader): the wrapper's exit code says how it ended."""
        try:
            answer = self._probe()
        except (ClusterError, ValueError) as error:
            self._failed(str(error))
            return
        if not answer.found:
            self._lost(f"the files of the launch are gone from pod {self.launch.pod}")
        elif answer.exit_code is not None:
            self._finish(answer.exit_code)
        elif answer.running:
            # The wrapper is gone but processes of the launch run on: follow them.
            self._retry_at = time.monotonic() + 0.5
        else:
            self._finish(KILLED, known=False)

    def _probe(self) -> detach.Probe:
        code, output = self._pods.run_in_pod(
            self.launch.pod, detach.probe(self.launch.directory, self.launch.launch_id)
        )
        if code != 0:
            raise ClusterError(f"cannot ask pod {self.launch.pod} about the launch: {output}")
        return detach.Probe.parse(output)

    def _failed(self, why: str) -> None:
        """The stream broke: read again from the offsets unless pod 0 is lost."""
        self._close_stream()
        try:
            lost = self._pods.launcher_lost(self.launch)
        except ClusterError as error:
            lost, why = None, f"{why}; {error}"
        if lost:
            self._lost(lost)
            return
        self._failures += 1
        if self._failures >= MAX_FAILURES:
            self._lost(
                f"the output of pod {self.launch.pod} could not be read "
                f"{self._failures} times in a row: {why}"
            )
            return
        log.warning("launch %s: reading its output again: %s", self.launch.launch_id, why)
        self._retry_at = time.monotonic() + min(0.5 * 2.0 ** (self._failures - 1), 10.0)

    def _lost(self, why: str) -> None:
        self._flush_partial()
        if self._killing:  # stopped on purpose: pod 0 may well be replaced by now
            self._finish(KILLED)
            return
        self._ready.append(OutputLine(None, "stderr", f"kubernetes: {why}"))
        self._finish(LOST)

    def _flush_partial(self) -> None:
        for stream in STREAMS:
            if self._partial[stream]:
                text = self._partial[stream].decode("utf-8", "replace")
                self._ready.append(replace(parse_line(text, stream), end=self._offsets[stream]))
                self._partial[stream] = b""
            self._ready_handed[stream] = self._offsets[stream]

    def _finish(self, code: int, known: bool = True) -> None:
        if self._code is not None:
            return
        self._flush_partial()
        self._close_stream()
        if code != 0 and not self._killing:
            self._end_reason = self._workers_lost()
        self._code, self._exit_known = code, known
        self._on_exit()

    def _workers_lost(self) -> str | None:
        """Asked at the launch's end, before the run's end puts the chart's image back and
        the StatefulSet replaces pods for that: a pod replaced then is no loss of the run."""
        recorded = (self._record.get("kubernetes") or {}).get(losses.RECORD_KEY)
        if not recorded:
            return None  # a launch by a master from before the pods were noted
        for look in range(2):
            if look:
                time.sleep(KUBELET_LAG)
            try:
                lost = self._pods.workers_lost(recorded, self.launch.pod)
            except ClusterError as error:
                log.warning(
                    "launch %s: cannot tell which pods it lost: %s", self.launch.launch_id, error
                )
                return None
            if lost:
                return lost
        return None

    def _close_stream(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    # -- offsets, stopping -----------------------------------------------------------------

    @property
    def source(self) -> str | None:
        """The launch's id: its files' offsets mean nothing in another launch's."""
        return self.launch.launch_id

    def checkpoint(self) -> None:
        """Save the offsets of every line handed out so far (the job calls it after they
        were stored). Never raises: a save that fails only means lines may be stored twice
        after a re-attach, while a raise would end the run."""
        out, err = self._handed["stdout"], self._handed["stderr"]
        if self._stream is not None:
            try:
                self._stream.write(f"{out} {err}\n")
                return
            except Exception as error:  # noqa: BLE001 - any broken stream: save by exec
                log.info("offsets not sent over the output stream: %s", error)
        command = detach.save_offsets(self.launch.directory, out, err)
        try:
            code, output = self._pods.run_in_pod(self.launch.pod, command)
        except ClusterError as error:
            code, output = -1, str(error)
        if code != 0:
            log.warning("launch %s: offsets not saved: %s", self.launch.launch_id, output)

    def kill(self) -> None:
        # Also called after a normal exit, to stop what a failed mpirun left behind: it must
        # not raise, or the run's end would not be recorded.
        self._killing = True
        try:
            self._on_kill()
        except ClusterError as error:
            log.warning("stopping the run's processes: %s", error)
        deadline = time.monotonic() + DRAIN_SECONDS
        while self._code is None and time.monotonic() < deadline:
            self._pull(min(0.5, max(0.0, deadline - time.monotonic())))
        if self._code is None:
            self._finish(KILLED)
        self._close_stream()
