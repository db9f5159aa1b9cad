"""A local launch as the job sees it: mpirun's output tailed from files, its exit code read
from the file its wrapper writes.

Files, not pipes: the RQ worker that launched mpirun can die without taking the ranks with
it, and a later job re-attaches by reading on from the offsets the last reader
checkpointed (after the lines were stored), so no line is lost or stored twice.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import psutil

from mlbench_master.cluster.followed import FollowedExecution
from mlbench_master.cluster.local import kernel_log, slots
from mlbench_master.cluster.local.processes import is_alive, kill_processes, launch_processes


def launch_session(info: dict[str, Any]) -> tuple[int | None, float | None]:
    """The recorded session id of a launch and its leader's create time."""
    return info.get("sid"), info.get("create_time")


class LocalExecution(FollowedExecution):
    """A launched (or re-attached) mpirun whose output is tailed from files."""

    def __init__(
        self, info: dict[str, Any], popen: Any = None, notes: dict[str, Any] | None = None
    ) -> None:
        self.info = info
        self._notes = dict(notes or {})
        super().__init__(Path(info["dir"]))
        self.popen = popen
        # False when mpirun ended unwatched and its wrapper recorded no exit code (killed).
        self._exit_known = True

    @property
    def record(self) -> dict[str, Any]:
        return {"local": self.info, **self._notes}

    @property
    def exit_known(self) -> bool:
        return self._exit_known

    def _exited(self) -> bool:
        if self._code is not None:
            return True
        if self.popen is not None:
            code = self.popen.poll()
            if code is None:
                return False
            # Killed by a signal: report it the way a shell does (128 + signal number).
            self._code = 128 - code if code < 0 else code
            return True
        try:
            proc = psutil.Process(self.info["pid"])
            same = abs(proc.create_time() - self.info["create_time"]) < 1.0
            if same and is_alive(proc):
                return False
        except psutil.Error:
            pass
        recorded = self._recorded_code()
        self._exit_known = recorded is not None
        self._code = 128 + signal.SIGKILL if recorded is None else recorded
        return True

    def _recorded_code(self) -> int | None:
        """The exit code the wrapper wrote; None when it was killed before it could."""
        try:
            return int((self.dir / "exit_code").read_text().strip())
        except (OSError, ValueError):
            return None

    def oom_killed(self, pids: set[int]) -> set[int]:
        return kernel_log.oom_killed(pids)

    def kill(self) -> None:
        """Stop every process of the launch, then remove its worker slots' network (the job
        calls this at every end of a run, after a clean exit too)."""
        home = Path(self.info["home"])
        try:
            kill_processes(
                lambda: launch_processes(home, self.info.get("run_id"), *launch_session(self.info))
            )
            if self.popen is not None:
                try:
                    self.popen.wait(timeout=5)
                except Exception:  # noqa: BLE001 - best effort reap of our own child
                    pass
        finally:
            slots.close_slots(home, self.info.get("run_id"))
