"""What a rank sent, on the board (issue 44): each entry carries the median over its runs of
the bytes per step and the bytes to the target, as their workers' trainers counted them
(the summaries), whichever algorithm ran; a run that missed the target adds nothing to the
second, and an entry whose runs said nothing says None rather than 0."""

from __future__ import annotations

import pytest

from mlbench_master.api.models import Run
from tests.board.stored import TASK

pytestmark = pytest.mark.django_db


def _entries(staff) -> dict[int, dict]:
    body = staff.get("/api/results/", {"task": TASK}).json()
    return {e["runs"][0]["id"]: e for s in body["sections"] for e in s["entries"]}


def _said(run: Run, **sent) -> None:
    Run.objects.filter(pk=run.pk).update(summary={**run.summary, **sent})


def test_an_entry_says_what_a_rank_sent_per_step_and_to_the_target(stored, staff):
    one, missed = stored.runs["one"], stored.runs["missed"]
    _said(one, comm_bytes_per_step=8004.0, comm_bytes_to_target=8004.0 * 32)
    _said(missed, comm_bytes_per_step=2000.0, comm_bytes_to_target=None)
    entries = _entries(staff)
    assert entries[one.pk]["sent"] == {"bytes_per_step": 8004.0, "bytes_to_target": 256128.0}
    assert entries[missed.pk]["sent"] == {"bytes_per_step": 2000.0, "bytes_to_target": None}


def test_a_summary_without_the_counts_is_none_not_zero(stored, staff):
    two = stored.runs["two"]
    summary = {k: v for k, v in two.summary.items() if not k.startswith("comm_bytes")}
    Run.objects.filter(pk=two.pk).update(summary=summary)
    assert _entries(staff)[two.pk]["sent"] == {"bytes_per_step": None, "bytes_to_target": None}
