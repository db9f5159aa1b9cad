"""The board ranks a result only beside results graded on the same number of test examples
(issue 42, part 1): a run graded on 2,000 of epsilon's 100,000 test rows is faster, and
must not rank above the one graded on the whole set; every entry and section says its count."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from mlbench_master.accounts.users import issue_user_token
from mlbench_master.api.models import Metric, Run
from tests.board.stored import TASK, evals
from tests.results.conftest import Maker

pytestmark = pytest.mark.django_db
GRADE = "evaluated_val_accuracy"


@pytest.fixture
def staff(settings, tmp_path) -> APIClient:
    settings.MLBENCH_HOME = tmp_path
    settings.MLBENCH_CLUSTER = "local"
    settings.MLBENCH_PUBLIC_READ = False
    client = APIClient()
    token = issue_user_token("root", create_user=True, superuser=True)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def graded_run(staff: APIClient, seed: int, reach_at: float, counts: list[int]) -> Run:
    """A run of TASK on the real data, graded at each evaluation on `counts[i]` examples
    (as grading.intake records them in each grade's metadata)."""
    run = Maker(staff).run(
        None, seed, 2, evals(reach_at), task=TASK, dataset="epsilon", graded=[0.5, 0.85, 0.86]
    )
    grades = Metric.objects.filter(run=run, name=GRADE).order_by("date")
    for grade, count in zip(grades, counts + counts[-1:] * 3, strict=False):
        Metric.objects.filter(pk=grade.pk).update(metadata={**grade.metadata, "examples": count})
    return run


def _board(staff: APIClient) -> dict:
    answer = staff.get("/api/results/", {"task": TASK})
    assert answer.status_code == 200, answer.json()
    return answer.json()


def _where(board: dict, run: Run) -> tuple[dict, dict]:
    for section in board["sections"]:
        for entry in section["entries"]:
            if run.pk in [r["id"] for r in entry["runs"]]:
                return section, entry
    raise AssertionError(f"run {run.pk} is not on the board")


def test_runs_graded_on_different_numbers_of_examples_are_ranked_apart(staff):
    whole = graded_run(staff, 1, 50.0, [100_000])
    small = graded_run(staff, 2, 20.0, [2_000])  # faster, on a fiftieth of the test set
    other = graded_run(staff, 3, 40.0, [100_000])
    board = _board(staff)
    (s_whole, e_whole), (s_small, e_small) = _where(board, whole), _where(board, small)
    assert s_whole is not s_small and _where(board, other)[0] is s_whole
    assert [e["rank"] for e in s_whole["entries"]] == [1, 2]  # other (40 s), then whole
    assert e_small["rank"] == 1 and e_small["score"] == 20.0  # first only among its own
    assert (e_whole["test_examples"], e_whole["whole_test_set"]) == (100_000, 100_000)
    assert e_whole["graded_on"] == "graded on the whole test set (100,000 examples)"
    assert (e_small["test_examples"], e_small["whole_test_set"]) == (2_000, 100_000)
    assert e_small["graded_on"] == "graded on 2,000 of 100,000 examples"
    assert s_small["label"].endswith("graded on 2,000 of 100,000 examples")
    assert s_small["test_examples"] == 2_000 and s_whole["test_examples"] == 100_000
    # The whole test set's section comes first: it is what a published result uses.
    assert board["sections"].index(s_whole) < board["sections"].index(s_small)


def test_an_ungraded_run_says_the_test_set_it_was_created_with(staff):
    maker = Maker(staff)
    run = maker.run(None, 4, 2, evals(30.0), task=TASK, dataset="epsilon")
    Run.objects.filter(pk=run.pk).update(test_examples=5_000)
    plain = maker.run(None, 5, 2, evals(35.0), task=TASK, dataset="epsilon")
    board = _board(staff)
    section, entry = _where(board, run)
    assert entry["evaluation"] == "self-reported"
    assert entry["graded_on"] == "graded on 5,000 of 100,000 examples"
    other_section, other = _where(board, plain)
    assert other["graded_on"] == "graded on the whole test set (100,000 examples)"
    assert section is not other_section and entry["rank"] == other["rank"] == 1


def test_grades_counting_different_test_sets_in_one_run_are_not_ranked(staff):
    run = graded_run(staff, 6, 30.0, [100_000, 2_000])
    _, entry = _where(_board(staff), run)
    assert entry["rank"] is None
    assert entry["unranked"] == "its grades count different numbers of examples: 2,000, 100,000"
