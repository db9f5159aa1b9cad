"""A Slurm job as the run job sees it: mpirun's output followed by offset in the files the
job writes (on the shared filesystem), its exit code from the file the batch script
writes, and Slurm's own word (squeue) for what the files cannot say: why it still waits,
and how it ended when the batch script itself was stopped (time limit, node failure,
out of memory, a cancel from outside).

Files, not a pipe from the job: the master can restart while the job runs, and the next
master reads on from the offsets checkpointed after the lines were stored.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from mlbench_master.cluster.base import ClusterError, OutputLine
from mlbench_master.cluster.followed import FollowedExecution
from mlbench_master.cluster.mpirun import parse_labelled_line, parse_line
from mlbench_master.cluster.slurm import commands, states
from mlbench_master.cluster.slurm.config import SlurmConfig

QUERY_SECONDS = 1.0  # how often squeue is asked while the job runs
KILL_PATIENCE = 30.0  # how long kill() waits for Slurm to end the job's processes


class SlurmExecution(FollowedExecution):
    """A submitted (or re-attached) Slurm job whose output is tailed from files."""

    def __init__(
        self, info: dict[str, Any], config: SlurmConfig, notes: dict[str, Any] | None = None
    ) -> None:
        self.info = info
        self.config = config
        self._notes = dict(notes or {})
        # mpirun tags each line with its rank; srun --label prefixes it.
        labelled = info.get("launcher") == "srun"
        self.launcher = "srun" if labelled else "mpirun"
        super().__init__(Path(info["dir"]), parse_labelled_line if labelled else parse_line)
        self._exit_known = True
        self._end_reason: str | None = None
        self._waiting: str | None = None
        self._asked = 0.0
        self._job: commands.JobInfo | None = None
        self._answered = False  # whether squeue answered since the job was last seen

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

    # -- output (followed.py reads it)
    def _read_new(self, final: bool) -> list[OutputLine]:
        lines = super()._read_new(final)
        if lines:
            self._waiting = None  # output: the job runs, whatever squeue said a moment ago
        return lines

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
