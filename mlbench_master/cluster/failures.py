"""FAILED reasons read from mpirun's own output (or srun's, on Slurm with its launcher).

This sits beside the mpirun builder (mpirun.py) because it parses what that command line
makes Open MPI print: its per-rank exit report, and the ranks' stderr tagged by
`--output tag`; srun's "task N: Exited with exit code C" lines likewise. A reason names the rank, the exit code with a hint ("killed: out of
memory?") and quotes the last lines the ranks wrote to stderr, so a person can act on it.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable

from mlbench_master.cluster.base import OutputLine

STDERR_TAIL = 15  # stderr lines quoted in a FAILED reason
REASON_MAX_CHARS = 4000
MPIRUN_LINES = 200  # mpirun's own lines kept to find its exit report

_SIGNAL_EXIT = re.compile(
    r"process rank (?P<rank>\d+) with PID \d+ on node \S+ exited on\s+signal (?P<sig>\d+)"
)
_CODE_EXIT = re.compile(r"Process name:\s*\[[^\]]*?,(?P<rank>\d+)\]\s+Exit code:\s+(?P<code>\d+)")
# srun as the launcher (--label, --kill-on-bad-exit) names the first task that failed, by
# its rank: its exit code, or the signal's name. Under mpirun on Slurm the same lines name
# Open MPI's daemons (prterun's tasks), not ranks, so they are read only without prterun.
_SRUN_EXIT = re.compile(
    r"srun: error: \S+: tasks? (?P<rank>\d+)[-,\d]*: "
    r"(?:Exited with exit code (?P<code>\d+)|(?P<signal>Killed|Terminated|Aborted|"
    r"Segmentation fault|Bus error|Interrupt))"
)
_SIGNAL_NAMES = {"Killed": 9, "Terminated": 15, "Aborted": 6, "Segmentation fault": 11,
                 "Bus error": 7, "Interrupt": 2}  # fmt: skip
_SIGNAL_HINTS = {
    9: "killed: out of memory?",
    15: "terminated",
    6: "aborted",
    11: "segmentation fault",
    7: "bus error",
    2: "interrupted",
}


def is_banner(text: str) -> bool:
    """Open MPI's separator lines (----, ====) say nothing a person needs in a reason."""
    return set(text.strip()) <= set("-=*")


def bounded(reason: str) -> str:
    """A reason cut to what the run page shows."""
    if len(reason) > REASON_MAX_CHARS:
        return reason[: REASON_MAX_CHARS - 1] + "…"
    return reason


def failure_reason(exit_code: int, mpirun_lines: Iterable[str], stderr_tail: Iterable[str]) -> str:
    """A FAILED reason a person can act on, from mpirun's report and the ranks' stderr."""
    report = " ".join(" ".join(mpirun_lines).split())
    launcher = "srun" if "srun: " in report and "prte" not in report.lower() else "mpirun"
    match = _SIGNAL_EXIT.search(report)
    srun = _SRUN_EXIT.search(report) if launcher == "srun" else None
    if srun:
        if srun["code"]:
            head = f"rank {srun['rank']} exited with code {srun['code']}"
        else:
            sig = _SIGNAL_NAMES[srun["signal"]]
            head = f"rank {srun['rank']} exited with code {128 + sig} ({_SIGNAL_HINTS[sig]})"
    elif match:
        sig = int(match["sig"])
        hint = _SIGNAL_HINTS.get(sig, f"signal {sig}")
        head = f"rank {match['rank']} exited with code {128 + sig} ({hint})"
    else:
        match = _CODE_EXIT.search(report)
        if match:
            head = f"rank {match['rank']} exited with code {match['code']}"
        elif exit_code > 128:
            sig = exit_code - 128
            head = (
                f"{launcher} exited with code {exit_code} "
                f"({_SIGNAL_HINTS.get(sig, f'signal {sig}')})"
            )
        else:
            head = f"{launcher} exited with code {exit_code}"
    tail = list(stderr_tail)
    if tail:
        head += "; last lines of stderr:\n" + "\n".join(tail)
    return bounded(head)


class OutputTail:
    """The end of a launch's output that a FAILED reason quotes (kept in memory only)."""

    def __init__(self) -> None:
        self.stderr: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)
        self.mpirun_stderr: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)
        self.mpirun_lines: collections.deque[str] = collections.deque(maxlen=MPIRUN_LINES)

    def add(self, lines: Iterable[OutputLine]) -> None:
        for line in lines:
            if line.rank is None:
                self.mpirun_lines.append(line.text)
            if line.stream == "stderr" and line.text.strip() and not is_banner(line.text):
                if line.rank is None:
                    self.mpirun_stderr.append(line.text)
                else:
                    self.stderr.append(f"[rank {line.rank}] {line.text}")

    def last_stderr(self) -> list[str]:
        """The ranks' last stderr lines, else mpirun's own."""
        return list(self.stderr or self.mpirun_stderr)

    def reason(self, exit_code: int) -> str:
        """Why a launch that exited with `exit_code` failed."""
        return failure_reason(exit_code, self.mpirun_lines, self.last_stderr())

    def with_stderr(self, head: str) -> str:
        """`head` followed by the last stderr lines (for ends with no exit report)."""
        tail = self.last_stderr()
        return bounded(head + ("; last lines of stderr:\n" + "\n".join(tail) if tail else ""))
