"""system.json's hw_notes is read by people: counts of one are said as such."""

from __future__ import annotations

import pytest

from mlbench_master.api.models import Run
from mlbench_master.bundles import system


@pytest.mark.parametrize(
    ("workers", "cpus", "said"),
    [
        (1, 1.0, "1 worker of 1 CPU core"),
        (1, 4.0, "1 worker of 4 CPU cores"),
        (2, 1.0, "2 workers of 1 CPU core each"),
        (3, 0.5, "3 workers of 0.5 CPU cores each"),
    ],
)
def test_hw_notes_says_counts_in_words(workers, cpus, said):
    run = Run(num_workers=workers, num_cpus=cpus, summary={}, manifest={})
    assert system.describe(run)["hw_notes"] == said
