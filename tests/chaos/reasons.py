"""What a run's reason must say when a fault hit it: the one table of the chaos series.

A run that a fault hit may survive it (FINISHED) or end because of it. When it ends FAILED
or CANCELLED, its reason must name what happened, as a person debugging it would need:
`FAULT_WORDS[kind]` holds the patterns (regular expressions, searched case-insensitively)
of which at least one must match the reason of some fault that hit the run. An empty
entry means the platform promises to survive that fault: a run it hit that FAILED anyway is
a violation whatever its reason says.

Patterns may name the fault's details in braces (`{rank}`: the rank that was hit); they
are filled in from the fault's log record before matching (a literal brace is doubled). A
pattern anchored with `^` demands the fault as the reason's first cause: a FAILED reason
names the first thing that went wrong, later failures after "; then: " (docs/architecture.rst,
"The first cause"). Adjust the words here, nowhere else.
"""

from __future__ import annotations

import re
from typing import Any

# jobs.UNRECORDED_UNWATCHED: the launch died too (the fault took it with the master's processes)
_ENDED_UNSEEN = r"^run lost: mpirun ended while its job was gone"

# fault kind -> patterns, one of which a FAILED/CANCELLED run's reason must match.
FAULT_WORDS: dict[str, tuple[str, ...]] = {
    # cluster/failures.py: a rank's signal death, read from mpirun's report
    "rank-kill": (r"^rank {rank} exited with code 137\b",),
    # a paused rank holds its peers in the all-reduce; it goes on when continued
    "rank-stop": (),
    # the job's view of its launch: mpirun's own exit status (128 + SIGKILL)
    "mpirun-kill": (r"^mpirun exited with code 137\b",),
    "mpirun-stop": (),
    # reconcile.JOB_DIED when no job watches the run any more; jobs.LOST when it cannot
    # be re-attached after a restart
    "rq-worker-kill": (r"^the run's job died", r"^master restarted; run lost", _ENDED_UNSEEN),
    "rq-worker-stop": (),
    # the reporter retries; the supervisor starts the web server again
    "web-kill": (),
    "web-stop": (),
    # a new, empty Redis: the job lives on, reconciliation re-registers it
    "redis-restart": (),
    # the job waits for the database (jobs.DB_PATIENCE); the reporter retries
    "postgres-restart": (),
    # the master's processes SIGKILLed, then `mlbench up`: the run is re-attached, or lost
    "master-restart": (r"^master restarted; run lost", _ENDED_UNSEEN),
    # DELETE /api/runs/<id>/ (runs.delete_run: "deleted by <user>")
    "cancel": (r"^deleted by\b", r"^cancelled by\b"),
    # the folder of the runs' output files fills up for a moment
    "disk-full": (r"no space left on device", r"\bENOSPC\b", r"disk (is )?full"),
    # one slot's link down for a moment: TCP retransmits
    "link-drop": (),
}

# A second launch of one run is allowed only where its log says the product launched it
# again (issue 35, item 3: Open MPI's launcher failing before any rank started is launched
# once more, "...; launching once more" in the run's log).
RETRY_WORDS = r"launching once more|retr(y|ied|ying) (the )?launch"


def patterns(kind: str, details: dict[str, Any]) -> list[str]:
    """The patterns for a fault of `kind`, with its details filled in."""
    if kind not in FAULT_WORDS:
        raise KeyError(f"fault kind {kind!r} has no entry in FAULT_WORDS")
    return [p.format(**details) for p in FAULT_WORDS[kind]]


def names(reason: str, kind: str, details: dict[str, Any]) -> bool:
    """Whether `reason` names a fault of `kind` with these details."""
    return any(re.search(p, reason or "", re.IGNORECASE) for p in patterns(kind, details))


def survivable(kind: str) -> bool:
    """Whether the platform promises that a run survives a fault of `kind`."""
    return not FAULT_WORDS[kind]
