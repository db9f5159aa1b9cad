"""The short form of the chaos series, run by `make test`: a handful of real runs queued on
a real embedded master (a PostgreSQL of its own) while faults of several kinds come at the
seed's moments; every invariant must hold. On failure the message holds the violations,
the runs and the fault log with the seed: `CHAOS_SEED=<seed> pytest tests/chaos/test_series.py`
replays it. The long form is `make chaos` (python -m tests.chaos).
"""

from __future__ import annotations

import json
import os

import pytest

from tests.chaos.series import Settings, run_series
from tests.chaos.summary import table

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

SEED = 35  # the short form's default; CHAOS_SEED picks another
# Fast runs of several kinds: a training run with rank 0's record, a language model (graded
# from its final model, not predictions), one asked by task fields, a compressed algorithm,
# cheap commands of the open division.
LABELS = (
    "resnet20-cifar10", "awd-lstm-wikitext2", "logreg topk", "logreg topk (task fields)",
    "python -c pass", "sleep 3 on every rank",
)  # fmt: skip
# Each kind once, in the seed's order, those that take seconds each: a rank, mpirun, the
# RQ worker, the web server, Redis, PostgreSQL, the whole master, the API's cancel, the
# runs' disk, a slot's link (the pauses are the long form's).
KINDS = (
    "rank-kill", "mpirun-kill", "rq-worker-kill", "web-kill", "redis-restart",
    "postgres-restart", "master-restart", "cancel", "disk-full", "link-drop",
)  # fmt: skip


@pytest.mark.timeout(600)
def test_a_short_chaos_series_keeps_every_promise(tmp_path):
    seed = int(os.environ.get("CHAOS_SEED") or SEED)
    settings = Settings(
        seed=seed, runs=10, faults=len(KINDS), kinds=KINDS, gap=(2.0, 6.0), labels=LABELS,
        deadline=400.0,
    )  # fmt: skip
    outcome = run_series(settings, tmp_path)
    print(outcome.runs(), table(outcome.summary), sep="\n")
    (tmp_path / "summary.json").write_text(json.dumps(outcome.summary, indent=2))
    assert outcome.held, outcome.report()
    assert outcome.summary["runs"]["asked"] == 10
    # The series meant something: most planned faults were done, not skipped or unreached.
    done = sum(entry["injected"] for entry in outcome.summary["faults"].values())
    assert done >= 6, outcome.report()
