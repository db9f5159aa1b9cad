"""A local launch as the job sees it: mpirun's output tailed from files, its exit code read
from the file its wrapper writes.

Files, not pipes: the RQ worker that launched mpirun can die without taking the ranks with
it, and a later job re-attaches by reading on from the offsets the last reader
checkpointed (after the lines were stored), so no line is lost or stored twice.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import psutil

from mlbench_master.cluster.base import Execution, OutputLine
from mlbench_master.cluster.local import slots
from mlbench_master.cluster.local.processes import is_alive, kill_processes, launch_processes
from mlbench_master.cluster.mpirun import parse_line

STREAMS = ("stdout", "stderr")


def launch_session(info: dict[str, Any]) -> tuple[int | None, float | None]:
    """The recorded session id of a launch and its leader's create time."""
    return info.get("sid"), info.get("create_time")


class LocalExecution(Execution):
    """A launched (or re-attached) mpirun whose output is tailed from files."""

    def __init__(
        self, info: dict[str, Any], popen: Any = None, notes: dict[str, Any] | None = None
    ) -> None:
        self.info = info
        self._notes = dict(notes or {})
        self.dir = Path(info["dir"])
        self.popen = popen
        self._offsets = self._load_offsets()
        self._handed = dict(self._offsets)  # bytes up to the last complete line handed out
        self._partial = {"stdout": b"", "stderr": b""}
        self._exited_code: int | None = None
        # False when mpirun ended unwatched and its wrapper recorded no exit code (killed).
        self._exit_known = True

    @property
    def record(self) -> dict[str, Any]:
        return {"local": self.info, **self._notes}

    @property
    def exit_known(self) -> bool:
        return self._exit_known

    # offsets survive the reader so a re-attached master does not store lines twice
    def _load_offsets(self) -> dict[str, int]:
        try:
            data = json.loads((self.dir / "offsets.json").read_text())
            return {"stdout": int(data["stdout"]), "stderr": int(data["stderr"])}
        except (OSError, ValueError, KeyError):
            return {"stdout": 0, "stderr": 0}

    def checkpoint(self) -> None:
        """Record that every line handed out so far is stored (the job calls it after a
        successful write), so a re-attached reader starts after them and misses none."""
        tmp = self.dir / "offsets.json.tmp"
        tmp.write_text(json.dumps(self._handed))
        tmp.replace(self.dir / "offsets.json")

    def _exited(self) -> bool:
        if self._exited_code is not None:
            return True
        if self.popen is not None:
            code = self.popen.poll()
            if code is None:
                return False
            # Killed by a signal: report it the way a shell does (128 + signal number).
            self._exited_code = 128 - code if code < 0 else code
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
        self._exited_code = 128 + signal.SIGKILL if recorded is None else recorded
        return True

    def _recorded_code(self) -> int | None:
        """The exit code the wrapper wrote; None when it was killed before it could."""
        try:
            return int((self.dir / "exit_code").read_text().strip())
        except (OSError, ValueError):
            return None

    def _pending(self) -> bool:
        for stream in STREAMS:
            try:
                size = (self.dir / f"{stream}.log").stat().st_size
            except OSError:
                size = 0
            if size > self._offsets[stream] or self._partial[stream]:
                return True
        return False

    def _read_new(self, final: bool) -> list[OutputLine]:
        lines: list[OutputLine] = []
        for stream in STREAMS:
            path = self.dir / f"{stream}.log"
            try:
                with open(path, "rb") as fh:
                    fh.seek(self._offsets[stream])
                    data = fh.read(4 * 1024 * 1024)
            except OSError:
                data = b""
            self._offsets[stream] += len(data)
            buf = self._partial[stream] + data
            *complete, rest = buf.split(b"\n")
            if final and rest:
                complete.append(rest)
                rest = b""
            self._partial[stream] = rest
            self._handed[stream] = self._offsets[stream] - len(rest)
            for raw in complete:
                lines.append(parse_line(raw.decode("utf-8", "replace"), stream))
        return lines

    def read(self, timeout: float) -> list[OutputLine]:
        deadline = time.monotonic() + timeout
        while True:
            exited = self._exited()
            lines = self._read_new(final=exited)
            if lines or time.monotonic() >= deadline or (exited and not self._pending()):
                return lines
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))

    def poll(self) -> int | None:
        if not self._exited() or self._pending():
            return None
        return self._exited_code

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
