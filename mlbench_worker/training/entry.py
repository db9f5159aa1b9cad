"""The one way a rank ends: every implementation and the backend benchmark run inside it.

A distributed job has two kinds of failure. A problem the user can fix (a bad option, a
missing data set, a checkpoint that does not fit) is found by every rank together, from
decisions they agreed on, so it is printed once, by rank 0, without a traceback, and the
rank exits with the error's code; mpirun then reports that code. Anything else is a bug or
a crash on one rank: it prints its traceback and aborts the whole MPI job, because its
partners would otherwise wait forever in the next collective.

Until a rank knows its world (the communicator is being made), rank 0 is the one mpirun
announced (`launch_rank`), as the option parser decides who prints, and the other ranks wait
ERROR_GRACE before they exit, as after a bad option: mpirun ends the job when the first rank
exits, and a silent rank 1 leaving first took rank 0's message with it (seen with
--implementation tensorflow --amp, refused before MPI starts).

A third kind: a failure on this rank alone that a person can still read in one sentence (an
outside training algorithm raised: `RankFailed`, from training/algorithm_guard.py). The rank
that hit it prints it, without a traceback, and aborts the job like a crash.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from mlbench_worker.training.errors import WorkerError
from mlbench_worker.training.option_parts import ERROR_GRACE, launch_rank


class RankFailed(Exception):
    """A failure of this rank alone, said in a sentence; the job is aborted (exit code 1)."""


@dataclass
class World:
    """This rank's place in the job, filled in by the body once it knows it."""

    rank: int
    size: int = 1
    abort: Callable[[int], None] | None = None  # ends every rank of the job

    def known(self, rank: int, size: int, abort: Callable[[int], None]) -> None:
        self.rank, self.size, self.abort = rank, size, abort


def run_rank(body: Callable[[World], int], cleanup: Callable[[], None] | None = None) -> int:
    """Run `body` (which calls `world.known` once its communicator exists); the exit code."""
    world = World(rank=launch_rank())
    try:
        return body(world)
    except WorkerError as exc:
        if world.rank == 0:
            print(f"mlbench-worker: error: {exc}", file=sys.stderr, flush=True)
        elif world.abort is None:  # no collective has ordered the ranks yet
            time.sleep(ERROR_GRACE)
        return exc.exit_code
    except RankFailed as exc:
        print(f"mlbench-worker: error: {exc}", file=sys.stderr, flush=True)
        if world.abort is not None and world.size > 1:
            world.abort(1)
        return 1
    except Exception:
        traceback.print_exc()
        sys.stderr.flush()
        if world.abort is not None and world.size > 1:
            world.abort(1)
        return 1
    finally:
        if cleanup is not None:
            cleanup()
