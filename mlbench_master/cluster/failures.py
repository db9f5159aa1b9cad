"""FAILED reasons read from a launch's output: the ranks' end lines, mpirun's report (or
srun's, on Slurm with its launcher), the ranks' stderr.

This sits beside the mpirun builder (mpirun.py) because it parses what that command line
makes print: the line each rank's watcher (mpirun.RANK_WATCH) writes when the rank ends,
with its exit code and the time; Open MPI's per-rank exit report and the ranks' stderr
tagged by `--output tag`; srun's "task N: Exited with exit code C" lines likewise.

A reason names the FIRST thing that went wrong, then the rest: "rank 1 exited with code 137
(killed: out of memory?); then: rank 0 exited with code 14". The launcher's report cannot
be trusted for the first: when rank 1 is killed, rank 0 may notice the broken connection,
abort, and reach mpirun first, which then reports rank 0. The watchers' lines carry the
time each rank ended, so the order is the ranks' own; the launcher's report is the fallback
(a watcher killed before it could write) and adds what the watchers did not say. The last
lines the ranks wrote to stderr follow, so a person can act on it.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from mlbench_master.cluster.base import OutputLine
from mlbench_master.cluster.mpirun import RANK_END

STDERR_TAIL = 15  # stderr lines quoted in a FAILED reason
REASON_MAX_CHARS = 4000
MPIRUN_LINES = 200  # mpirun's own lines kept to find its exit report
RANK_ENDS = 4096  # ranks' end lines kept (one a rank)

_SIGNAL_EXIT = re.compile(
    r"process rank (?P<rank>\d+) with PID \d+ on node \S+ exited on\s+signal (?P<sig>\d+)"
)
_CODE_EXIT = re.compile(r"Process name:\s*\[[^\]]*?,(?P<rank>\d+)\]\s+Exit code:\s+(?P<code>\d+)")
# srun as the launcher (--label, --kill-on-bad-exit) names the first task that failed, by
# its rank: its exit code, or the signal's name. Under mpirun on Slurm the same lines name
# Open MPI's daemons (prterun's tasks), not ranks: they are read only when srun launched.
_SRUN_EXIT = re.compile(
    r"srun: error: \S+: tasks? (?P<rank>\d+)[-,\d]*: "
    r"(?:Exited with exit code (?P<code>\d+)|(?P<signal>Killed|Terminated|Aborted|"
    r"Segmentation fault|Bus error|Interrupt))"
)
_RANK_END = re.compile(  # matched at the start of every rank line: anchored, cheap
    re.escape(RANK_END) + r" code=(?P<code>\d+) pid=(?P<pid>\d*) time=(?P<time>[\d.]*)\s*$"
)
# What bash says of a watched child that a signal ended ("mlbench-rank: line 2: 41 Killed
# "$@""): the watcher's own line says it better, so it is left out of the stderr quoted.
_BASH_JOB_REPORT = re.compile(r"^mlbench-rank: line \d+: +\d+ ")
# Slurm's step daemon, on a node whose tasks srun stops after another task failed
# (--kill-on-bad-exit), a scancel or a time limit: written into that node's tasks' output.
_SLURM_CANCELLED = re.compile(r"\*\*\* (?:STEP|JOB) \S+ ON \S+ CANCELLED AT ")
_CALLED_ABORT = re.compile(r"process rank (?P<rank>\d+) with PID \d+ on node \S+ calling \W?abort")
THEN_MAX = 3  # later failures named after "then:"
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


@dataclass(frozen=True)
class RankEnd:
    """A rank's end as its watcher wrote it: exit code (128 + N for signal N), the pid of
    the rank's program, and the time (seconds since the epoch; None where bash had none)."""

    rank: int
    code: int
    pid: int | None
    time: float | None


def rank_end(line: OutputLine) -> RankEnd | None:
    """The watcher's end line of a rank, else None."""
    match = _RANK_END.match(line.text) if line.rank is not None else None
    if match is None:
        return None
    time_text = match["time"]
    return RankEnd(
        line.rank,
        int(match["code"]),
        int(match["pid"]) if match["pid"] else None,
        float(time_text) if time_text else None,
    )


def by_signal(code: int) -> bool:
    """Whether a shell's exit code says a signal ended the program (128 + N, N a signal:
    Open MPI's own codes, e.g. 213, are not)."""
    return 128 < code <= 128 + 64


def describe_code(code: int) -> str:
    """`exited with code C`, with the signal's meaning for codes that stand for one."""
    if by_signal(code):
        sig = code - 128
        return f"exited with code {code} ({_SIGNAL_HINTS.get(sig, f'signal {sig}')})"
    return f"exited with code {code}"


# Signals that end a program from outside or by its own fault; TERM, INT and HUP are how a
# launcher or a person stops the rest once something failed.
_STOPPING_SIGNALS = {15, 2, 1}
SAME_MOMENT = 1.0  # seconds within which two ends are ordered by their kind, not their time


def _kind(end: RankEnd, stopped: Collection[int] = ()) -> int:
    """0: ended by a fatal signal (killed, crashed); 1: exited with a code (often a reaction:
    an abort after a peer vanished); 2: stopped by TERM, INT or HUP, or by any signal after
    its launcher said it was stopping the rank (`stopped`): a launcher's clean-up."""
    if by_signal(end.code):
        return 2 if end.code - 128 in _STOPPING_SIGNALS or end.rank in stopped else 0
    return 1


def first_failures(ends: Iterable[RankEnd], stopped: Collection[int] = ()) -> list[RankEnd]:
    """The ranks that failed, first first.

    By the time each ended, except within SAME_MOMENT of the earliest: a watcher reads the
    clock when it gets the CPU, which on a loaded machine can be late by more than the time
    a peer takes to notice the death, abort and end. Ends that close are ordered by kind (a
    rank killed or crashed before one that exited with a code, before one stopped by its
    launcher), then by time. Ends without a time keep the order their lines came in, after
    the timed ones. `stopped`: ranks their launcher announced it was stopping before they
    ended (Slurm's "STEP ... CANCELLED"): srun SIGKILLs them, which is no fault of theirs."""
    failed = [end for end in ends if end.code != 0]
    by_time = sorted(failed, key=lambda end: end.time if end.time is not None else float("inf"))
    if not by_time or by_time[0].time is None:
        return by_time
    moment = by_time[0].time + SAME_MOMENT
    close = [end for end in by_time if end.time is not None and end.time <= moment]
    first = min(close, key=lambda end: (_kind(end, stopped), end.time))
    return [first, *(end for end in by_time if end is not first)]


def is_banner(text: str) -> bool:
    """Open MPI's separator lines (----, ====) say nothing a person needs in a reason."""
    return set(text.strip()) <= set("-=*")


def bounded(reason: str) -> str:
    """A reason cut to what the run page shows."""
    if len(reason) > REASON_MAX_CHARS:
        return reason[: REASON_MAX_CHARS - 1] + "…"
    return reason


@dataclass(frozen=True)
class LauncherReport:
    """What the launcher says failed: `head` in words, the rank it names (None: none), and
    whether the launcher itself was ended by a signal (no rank named, a signal's code), which
    then came before the ranks' ends: they die when their launcher is gone."""

    head: str
    rank: int | None = None
    killed: bool = False


def launcher_report(
    exit_code: int, mpirun_lines: Iterable[str], launcher: str = "mpirun"
) -> LauncherReport:
    """The launcher's report of a rank's signal or exit code (srun's lines when `launcher`
    is srun), of a rank that called MPI_Abort, else its own exit code. The launcher is the
    driver's word, never guessed from the lines: mpirun on Slurm prints srun's warnings too."""
    report = " ".join(" ".join(mpirun_lines).split())
    match = _SIGNAL_EXIT.search(report)
    srun = _SRUN_EXIT.search(report) if launcher == "srun" else None
    if srun:
        code = int(srun["code"]) if srun["code"] else 128 + _SIGNAL_NAMES[srun["signal"]]
        return LauncherReport(f"rank {srun['rank']} {describe_code(code)}", int(srun["rank"]))
    if match:
        code = 128 + int(match["sig"])
        return LauncherReport(f"rank {match['rank']} {describe_code(code)}", int(match["rank"]))
    match = _CODE_EXIT.search(report)
    if match:
        code = int(match["code"])
        return LauncherReport(f"rank {match['rank']} {describe_code(code)}", int(match["rank"]))
    match = _CALLED_ABORT.search(report)
    if match:
        return LauncherReport(f"rank {match['rank']} called MPI_Abort", int(match["rank"]))
    return LauncherReport(f"{launcher} {describe_code(exit_code)}", killed=by_signal(exit_code))


def first_cause(heads: list[str]) -> str:
    """The first failure, then at most THEN_MAX of the later ones."""
    first, later = heads[0], heads[1:]
    if not later:
        return first
    shown = "; then: ".join(later[:THEN_MAX])
    more = f" (and {len(later) - THEN_MAX} more)" if len(later) > THEN_MAX else ""
    return f"{first}; then: {shown}{more}"


OOM_KILLED = "killed by the kernel's OOM killer"


def describe_end(end: RankEnd, oom_killed: Collection[int] = ()) -> str:
    """`rank N exited with code C (...)`: the kernel's word where it says it killed the
    rank's program for memory, else the signal's usual meaning."""
    if end.pid is not None and end.pid in oom_killed:
        return f"rank {end.rank} exited with code {end.code} ({OOM_KILLED})"
    return f"rank {end.rank} {describe_code(end.code)}"


def rank_failures(
    ends: Iterable[RankEnd],
    launcher: LauncherReport | None,
    oom_killed: Collection[int] = (),
    stopped: Collection[int] = (),
) -> list[str]:
    """The failures in the order they happened: the ranks' from their watchers' lines; the
    launcher's before them when a signal ended it, after them where it names a rank no
    watcher spoke for (one killed before it could write), alone where there are none."""
    failed = first_failures(ends, stopped)
    heads = [describe_end(end, oom_killed) for end in failed]
    if launcher is None:
        return heads
    if launcher.killed:
        return [launcher.head, *heads]
    if not heads or (launcher.rank is not None and launcher.rank not in {e.rank for e in failed}):
        heads.append(launcher.head)
    return heads


def failure_reason(
    exit_code: int,
    mpirun_lines: Iterable[str],
    stderr_tail: Iterable[str],
    ends: Iterable[RankEnd] = (),
    oom_killed: Collection[int] = (),
    launcher: str = "mpirun",
    stopped: Collection[int] = (),
) -> str:
    """A FAILED reason a person can act on: the first failure, the later ones, the ranks'
    last stderr lines. `oom_killed`: the pids the kernel says its OOM killer ended;
    `stopped`: the ranks their launcher stopped (first_failures)."""
    report = launcher_report(exit_code, mpirun_lines, launcher)
    head = first_cause(rank_failures(ends, report, oom_killed, stopped))
    return with_tail(head, stderr_tail)


def with_tail(head: str, stderr_tail: Iterable[str]) -> str:
    tail = list(stderr_tail)
    if tail:
        head += "; last lines of stderr:\n" + "\n".join(tail)
    return bounded(head)


class OutputTail:
    """The end of a launch's output that a FAILED reason quotes (kept in memory only), and
    the ranks' end lines, from the stream and from the watchers' file (`add_recorded`)."""

    def __init__(self, launcher: str = "mpirun") -> None:
        self.launcher = launcher
        self.stderr: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)
        self.mpirun_stderr: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)
        self.mpirun_lines: collections.deque[str] = collections.deque(maxlen=MPIRUN_LINES)
        self.ends: collections.deque[RankEnd] = collections.deque(maxlen=RANK_ENDS)
        # Ranks whose node's step daemon said "CANCELLED" before the rank's end line came:
        # in one rank's stream the two keep their order, so these ended by Slurm's hand.
        self.stopped: set[int] = set()

    def add(self, lines: Iterable[OutputLine]) -> None:
        for line in lines:
            end = rank_end(line)
            if end is not None:
                self.ends.append(end)
                continue
            if line.rank is not None and _SLURM_CANCELLED.search(line.text):
                if all(end.rank != line.rank for end in self.ends):
                    self.stopped.add(line.rank)
            if line.rank is None:
                self.mpirun_lines.append(line.text)
            elif _BASH_JOB_REPORT.match(line.text):
                continue
            if line.stream == "stderr" and line.text.strip() and not is_banner(line.text):
                if line.rank is None:
                    self.mpirun_stderr.append(line.text)
                else:
                    self.stderr.append(f"[rank {line.rank}] {line.text}")

    def add_recorded(self, text: str) -> None:
        """The watchers' files ("RANK mlbench rank end: ..." a line): the ends the stream
        lost (its reader gone first) or that came before a re-attach are added, once. A last
        line without its newline was cut short (a full disk) and is left out: a time cut in
        the middle would read as an earlier end."""
        known = {(end.rank, end.pid) for end in self.ends}
        for raw in text.split("\n")[:-1]:
            rank, _, rest = raw.partition(" ")
            if not rank.isdigit():
                continue  # a line cut short by a full disk, or no rank variable set
            end = rank_end(OutputLine(int(rank), "stderr", rest))
            if end is not None and (end.rank, end.pid) not in known:
                known.add((end.rank, end.pid))
                self.ends.append(end)

    def last_stderr(self) -> list[str]:
        """The ranks' last stderr lines, else mpirun's own."""
        return list(self.stderr or self.mpirun_stderr)

    def pids(self) -> set[int]:
        """The pids of the ranks' programs that ended with a failure."""
        return {end.pid for end in self.ends if end.code != 0 and end.pid is not None}

    def reason(self, exit_code: int, oom_killed: Collection[int] = ()) -> str:
        """Why a launch that exited with `exit_code` failed."""
        return failure_reason(
            exit_code,
            self.mpirun_lines,
            self.last_stderr(),
            self.ends,
            oom_killed,
            self.launcher,
            self.stopped,
        )

    def with_stderr(self, head: str, oom_killed: Collection[int] = ()) -> str:
        """`head`, a cause the cluster or the master saw first (a scheduler's limit, a lost
        node, a launcher killed), then the ranks that failed after it and the last stderr
        lines."""
        later = rank_failures(self.ends, None, oom_killed, self.stopped)
        return with_tail(first_cause([head, *later]), self.last_stderr())
