"""A Slurm job as the run job sees it: mpirun's output followed by offset in the files the
job writes (on the shared filesystem), its exit code from the file the batch script
writes, and Slurm's own word (squeue) for what the files cannot say: why it still waits,
and how it ended when the batch script itself was stopped (time limit, node failure,
out of memory, a cancel from outside).

Files, not a pipe from the job: the master can restart while the job runs, and the next
master reads on from the offsets checkpointed after the lines were stored.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from mlbench_master.cluster.base import ClusterError, Execution, OutputLine
from mlbench_master.cluster.mpirun import parse_labelled_line, parse_line
from mlbench_master.cluster.slurm import commands, states
from mlbench_master.cluster.slurm.config import SlurmConfig

STREAMS = ("stdout", "stderr")
QUERY_SECONDS = 1.0  # how often squeue is asked while the job runs
KILL_PATIENCE = 30.0  # how long kill() waits for Slurm to end the job's processes


class SlurmExecution(Execution):
    """A submitted (or re-attached) Slurm job whose output is tailed from files."""

    def __init__(
        self, info: dict[str, Any], config: SlurmConfig, notes: dict[str, Any] | None = None
    ) -> None:
        self.info = info
        self.config = config
        self._notes = dict(notes or {})
        self.dir = Path(info["dir"])
        self._offsets = self._load_offsets()
        self._handed = dict(self._offsets)
        self._partial = {"stdout": b"", "stderr": b""}
        self._code: int | None = None
        self._exit_known = True
        self._end_reason: str | None = None
        self._waiting: str | None = None
        self._asked = 0.0
        self._job: commands.JobInfo | None = None
        self._answered = False  # whether squeue answered since the job was last seen
        # mpirun tags each line with its rank; srun --label prefixes it.
        self._parse = parse_labelled_line if info.get("launcher") == "srun" else parse_line

    @property
    def job_id(self) -> str:
        return str(self.info["job_id"])

    @property
    def record(self) -> dict[str, Any]:
        return {"slurm": self.info, **self._notes}

    @property
    def exit_known(self) -> bool:
        return self._exit_known

    def waiting(self) -> str | None:
        self._exited()
        return self._waiting

    def end_reason(self) -> str | None:
        return self._end_reason

    # -- offsets (so a re-attached reader neither loses nor repeats a line)
    def _load_offsets(self) -> dict[str, int]:
        try:
            data = json.loads((self.dir / "offsets.json").read_text())
            return {"stdout": int(data["stdout"]), "stderr": int(data["stderr"])}
        except (OSError, ValueError, KeyError):
            return {"stdout": 0, "stderr": 0}

    def checkpoint(self) -> None:
        tmp = self.dir / "offsets.json.tmp"
        tmp.write_text(json.dumps(self._handed))
        tmp.replace(self.dir / "offsets.json")

    # -- Slurm's view
    def _query(self) -> commands.JobInfo | None:
        """The job as squeue says now (at most once a QUERY_SECONDS); the last answer while
        slurmctld does not answer, so a controller blip neither ends nor stalls a run."""
        if time.monotonic() - self._asked < QUERY_SECONDS:
            return self._job
        self._asked = time.monotonic()
        try:
            self._job = commands.job(self.config, self.job_id)
            self._answered = True
        except ClusterError:
            self._answered = False
        return self._job

    def _recorded_code(self) -> int | None:
        try:
            return int((self.dir / "exit_code").read_text().strip())
        except (OSError, ValueError):
            return None

    def _exited(self) -> bool:
        if self._code is not None:
            return True
        # Slurm first, the file second: a job seen ended has written its code by then (if
        # it ever will), so a script that wrote it just after a read is not taken as killed.
        job = self._query()
        recorded = self._recorded_code()
        if recorded is not None:
            # mpirun ended and the script said how; Slurm may know better why (it stopped
            # mpirun at the time limit, or a node died under it).
            self._code = recorded
            self._waiting = None
            if recorded != 0 and job is not None:
                self._end_reason = states.ended(job)
            return True
        if job is None:
            if not self._answered:
                return False  # slurmctld does not answer: keep waiting for it
            # Forgotten by slurmctld (ended longer ago than MinJobAge) with no exit code
            # written: the batch script was killed before it could write it.
            self._code, self._exit_known = 137, False
            return True
        if job.waiting:
            self._waiting = states.pending(job)
            never = states.never_starts(job)
            if never:
                self._code, self._exit_known, self._end_reason = 1, False, never
                self._waiting = None
                return True
            return False
        self._waiting = None
        if job.active:
            return False
        self._code = states.exit_status(job.exit_code)
        self._end_reason = states.ended(job) or (
            f"the batch script of Slurm job {job.job_id} ended ({job.state}) without recording "
            "mpirun's exit code"
        )
        return True

    # -- output
    def _pending_output(self) -> bool:
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
            try:
                with open(self.dir / f"{stream}.log", "rb") as fh:
                    fh.seek(self._offsets[stream])
                    data = fh.read(4 * 1024 * 1024)
            except OSError:
                data = b""
            self._offsets[stream] += len(data)
            *complete, rest = (self._partial[stream] + data).split(b"\n")
            if final and rest:
                complete.append(rest)
                rest = b""
            self._partial[stream] = rest
            self._handed[stream] = self._offsets[stream] - len(rest)
            lines += [self._parse(raw.decode("utf-8", "replace"), stream) for raw in complete]
        if lines:
            self._waiting = None  # output: the job runs, whatever squeue said a moment ago
        return lines

    def read(self, timeout: float) -> list[OutputLine]:
        deadline = time.monotonic() + timeout
        while True:
            exited = self._exited()
            lines = self._read_new(final=exited)
            if lines or time.monotonic() >= deadline or (exited and not self._pending_output()):
                return lines
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))

    def poll(self) -> int | None:
        if not self._exited() or self._pending_output():
            return None
        return self._code

    def kill(self) -> None:
        """scancel the job, and return once Slurm has ended its every process."""
        stop_job(self.config, self.job_id)


def stop_job(config: SlurmConfig, job_id: str, patience: float = KILL_PATIENCE) -> None:
    """scancel `job_id` and wait until Slurm says it is no longer active (its processes are
    gone: COMPLETING lasts until every node has killed them); ClusterError when it stays."""
    job = commands.job(config, job_id)
    if job is None or not job.active:
        return
    commands.cancel(config, [job_id])
    deadline = time.monotonic() + patience
    while True:
        job = commands.job(config, job_id)
        if job is None or not job.active:
            return
        if time.monotonic() >= deadline:
            raise ClusterError(
                f"Slurm job {job_id} is still {job.state} {patience:g} s after scancel"
            )
        time.sleep(0.2)
