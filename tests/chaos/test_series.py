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
# Fast runs of several kinds: a training run with rank 0's record, one asked by task
# fields, a compressed algorithm, cheap commands of the open division.
LABELS = ("resnet20-cifar10", "logreg topk", "python -c pass", "sleep 3 on every rank")
# Faults of several kinds that each take seconds (the master's restart is the long form's).
KINDS = ("rank-kill", "web-kill", "redis-restart", "postgres-restart", "cancel", "link-drop")


@pytest.mark.timeout(600)
def test_a_short_chaos_series_keeps_every_promise(tmp_path):
    seed = int(os.environ.get("CHAOS_SEED") or SEED)
    settings = Settings(
        seed=seed, runs=5, faults=5, kinds=KINDS, gap=(3.0, 8.0), labels=LABELS, deadline=400.0
    )
    outcome = run_series(settings, tmp_path)
    print(table(outcome.summary))
    (tmp_path / "summary.json").write_text(json.dumps(outcome.summary, indent=2))
    assert outcome.held, outcome.report()
    assert outcome.summary["runs"]["asked"] == 5
