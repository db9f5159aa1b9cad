"""A count of runs reads as words: "1 run", "2 runs", never "run(s)" (issue 50), in the
409 of a full queue and in a series' statistics that are not valid yet."""

import pytest

from mlbench_master.results.statistics import _validity
from mlbench_master.runs.lifecycle import RunConflict


@pytest.mark.parametrize(
    ("queued", "said"), [(1, "1 run waits in the queue"), (2, "2 runs wait in the queue")]
)
def test_the_queue_conflict_counts_runs(queued, said):
    message = str(RunConflict(None, queued))
    assert message.startswith(said + ";") and "(s)" not in message


@pytest.mark.parametrize(
    ("pending", "said"), [(1, "1 run not finished yet"), (3, "3 runs not finished yet")]
)
def test_statistics_pending_runs_are_counted(pending, said):
    assert _validity(4, pending, 0) == (False, said)
