"""The one launch failure worth a second try: Open MPI's launcher losing its PMIx listener.

Open MPI 5's launcher (mpirun, prterun) now and then fails to open the listener of its
PMIx server (about once in 1,500 launches on our machines) and stops before it starts any
rank, saying "The PMIx server's listener thread failed to start". Nothing of the run has
run then, so launching once more is safe, and it is what a person would do. Every other
failure, and this message once a rank has spoken, may come from the run itself or may
have done part of its work: those are never retried, and the run fails with the
launcher's own words.

The run job (mlbench_master/runs/jobs.py) retries it once and says so in the run's log; the
tests' own mpirun helper (tests/worker/helpers.py) reads the same message. "No rank
started" is read from the output: with `--output tag` every line a rank writes carries its
rank (cluster/mpirun.py, parse_line), mpirun's own lines carry none.
"""

from __future__ import annotations

from collections.abc import Iterable

from mlbench_master.cluster.base import OutputLine

LISTENER_FAILED = "The PMIx server's listener thread failed to start"

RELAUNCH_NOTE = (
    "mlbench: mpirun could not open its PMIx listener before any rank started "
    "(Open MPI's transient launch failure); launching once more"
)


def says_listener_failed(text: str) -> bool:
    """Whether `text` (some of the launcher's output) holds Open MPI's words for it."""
    return LISTENER_FAILED in text


class LaunchStart:
    """What one launch's output says about its start, line by line as it comes."""

    def __init__(self) -> None:
        self.rank_spoke = False  # a line tagged with a rank: that rank started
        self.listener_failed = False  # mpirun's own line said its PMIx listener failed

    def add(self, lines: Iterable[OutputLine]) -> None:
        for line in lines:
            if line.rank is not None:
                self.rank_spoke = True
            elif says_listener_failed(line.text):
                self.listener_failed = True

    def failed_transiently(self, exit_code: int) -> bool:
        """Whether a launch that ended with `exit_code` met the transient failure: it
        failed, mpirun said its listener did not start, and no rank had started."""
        return exit_code != 0 and self.listener_failed and not self.rank_spoke
