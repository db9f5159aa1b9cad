"""The algorithm-study suite (mlbench_worker/shared/study_suite.py): every workload and
target is the catalogue's and graded by the evaluator, the conditions are run fields the
local driver shapes, the held-out draw is reproducible, bad choices are named, and the
declaration cannot change without its version."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mlbench_worker.shared import algorithm_catalogue, catalogue, metric_points, study_suite
from mlbench_worker.shared.evaluation import graded_name
from mlbench_worker.shared.study_suite import (
    CONDITIONS,
    WORKLOADS,
    UnknownChoice,
    check_choices,
    draw_variant,
    suite_seconds,
)

# The declaration of SUITE_VERSION "2". A change to any number that decides a score changes
# the fingerprint: then raise SUITE_VERSION and pin the new pair here.
PINNED = ("2", "15a2a63cf0edeef3")


def test_the_declaration_is_pinned_to_its_version() -> None:
    assert (study_suite.SUITE_VERSION, study_suite.fingerprint()) == PINNED


def test_importing_it_pulls_neither_torch_nor_django() -> None:
    code = (
        "import sys, mlbench_worker.shared.study_suite; "
        "print(any(m.split('.')[0] in ('torch', 'django') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_suite_is_tasks_1a_2_and_3b() -> None:
    labels = {w.label: w.task for w in WORKLOADS.values()}
    assert labels == {"task 1a": "resnet20-cifar10", "task 2": "logreg-epsilon",
                      "task 3b": "gpt-wikitext2"}  # fmt: skip
    assert catalogue.get("gpt-wikitext2").category.startswith("3b")


def test_every_target_is_a_catalogue_goal_the_evaluator_grades() -> None:
    for w in WORKLOADS.values():
        goal = catalogue.get(w.task).goal(study_suite.SUITE_GOAL)
        assert (w.target.metric, w.target.value, w.target.direction) == (
            goal.metric, goal.value, goal.direction,
        )  # fmt: skip
        graded = metric_points.BY_NAME[graded_name(w.target.metric)]
        assert graded.by == metric_points.EVALUATOR
        assert w.budget_source and 0 < w.time_budget < catalogue.get(w.task).time_budget


def test_targets_reach_in_their_direction() -> None:
    acc = WORKLOADS["resnet20-cifar10"].target
    ppl = WORKLOADS["gpt-wikitext2"].target
    assert acc.reached(0.70) and not acc.reached(0.69)
    assert ppl.reached(250.0) and not ppl.reached(251.0)


def test_a_workloads_batch_is_its_sizings_else_the_tasks() -> None:
    assert WORKLOADS["gpt-wikitext2"].batch_size == 8 != catalogue.get("gpt-wikitext2").batch_size
    assert WORKLOADS["gpt-wikitext2"].run_fields()["batch_size"] == 8
    assert WORKLOADS["resnet20-cifar10"].batch_size == catalogue.get("resnet20-cifar10").batch_size
    # A variant's batch replaces the workload's: the flag once, the variant's value.
    v = draw_variant("gpt-wikitext2", 7)
    assert v.worker_args().count("--batch-size") == 1 and v.run_fields()["batch_size"] == 16


def test_a_study_of_an_earlier_version_keeps_its_budgets() -> None:
    assert study_suite.time_budget("gpt-wikitext2") == WORKLOADS["gpt-wikitext2"].time_budget
    assert study_suite.time_budget("gpt-wikitext2", "1") == 90.0
    for version, budgets in study_suite.EARLIER_BUDGETS.items():
        assert version != study_suite.SUITE_VERSION and set(budgets) <= set(WORKLOADS)
    assert study_suite.time_budget("gpt-wikitext2", "0") == WORKLOADS["gpt-wikitext2"].time_budget


def test_one_algorithms_suite_fits_in_its_time_per_seed() -> None:
    assert suite_seconds() <= study_suite.SUITE_SECONDS
    assert suite_seconds(seeds=3) == 3 * suite_seconds()
    one = [WORKLOADS["logreg-epsilon"]]
    # (30 s budget + 20 s start-up) x (5 conditions + the held-out variant).
    assert suite_seconds(one) == (30 + study_suite.STARTUP_SECONDS) * 6


def test_conditions_as_the_local_drivers_run_fields() -> None:
    assert [c.name for c in CONDITIONS.values()] == [
        "unlimited", "1gbit", "100mbit", "10mbit", "100mbit-20ms",
    ]  # fmt: skip
    assert CONDITIONS["unlimited"].run_fields(10000) == {"max_bandwidth": 10000, "latency": None}
    assert CONDITIONS["1gbit"].run_fields(10000) == {"max_bandwidth": 1000, "latency": None}
    assert CONDITIONS["100mbit-20ms"].run_fields(10000) == {"max_bandwidth": 100, "latency": 20.0}
    with pytest.raises(UnknownChoice, match="1gbit.*at most 500"):
        CONDITIONS["1gbit"].run_fields(500)
    assert study_suite.HELD_OUT_CONDITION in CONDITIONS


def test_the_draw_is_reproducible_from_its_seed_and_differs_for_another() -> None:
    for name in WORKLOADS:
        first = draw_variant(name, 7)
        assert draw_variant(name, 7) == first and first.seed == 7
        others = {draw_variant(name, s) for s in range(8, 20)}
        assert any(v.data_seed != first.data_seed for v in others)
    # Pinned: the same seed gives the same variant on any machine and Python.
    v = draw_variant("resnet20-cifar10", 7)
    assert (v.task, v.batch_size, v.data_seed) == ("resnet32-cifar10", 256, 1955576611)


def test_variants_use_only_knobs_the_worker_has_and_differ_from_the_base() -> None:
    for name, w in WORKLOADS.items():
        for seed in range(30):
            v = draw_variant(name, seed)
            info = catalogue.get(v.task)
            assert v.data_seed >= study_suite.VARIANT_SEED_FLOOR
            assert v.batch_size != w.batch_size
            assert info.category.split()[0] == catalogue.get(w.task).category.split()[0]
            assert v.target == study_suite.target_of(v.task) and v.time_budget == w.time_budget
            fields = v.run_fields()
            assert fields["task"] == v.task and fields["seed"] == v.data_seed
            assert v.worker_args()[-2:] == ("--batch-size", str(v.batch_size))
    # The worker parses every flag a variant adds (its real options, no invented ones).
    from mlbench_worker.training.options import build_parser

    for name in WORKLOADS:
        v = draw_variant(name, 3)
        args = build_parser().parse_args([v.task, *v.worker_args(), "--seed", str(v.data_seed)])
        assert args.batch_size == v.batch_size and args.seed == v.data_seed


def test_every_suite_task_admits_the_default_algorithm() -> None:
    for w in WORKLOADS.values():
        assert algorithm_catalogue.DEFAULT_ALGORITHM in catalogue.get(w.task).algorithms


def test_choices_are_checked_and_bad_ones_named() -> None:
    workloads, conditions = check_choices()
    assert len(workloads) == 3 and len(conditions) == 5
    workloads, conditions = check_choices(["logreg-epsilon"], ["10mbit", "1gbit"])
    assert [w.name for w in workloads] == ["logreg-epsilon"]
    assert [c.name for c in conditions] == ["10mbit", "1gbit"]
    with pytest.raises(UnknownChoice, match="unknown workload 'resnet18-cifar10'.*logreg-epsilon"):
        check_choices(["resnet18-cifar10"])
    with pytest.raises(UnknownChoice, match="unknown condition '5mbit'"):
        check_choices(None, ["1gbit", "5mbit"])
    with pytest.raises(UnknownChoice, match="named twice: '1gbit'"):
        check_choices(None, ["1gbit", "1gbit"])
    with pytest.raises(UnknownChoice, match="at least one workload"):
        check_choices([])
    with pytest.raises(UnknownChoice, match="unknown workload 'nope'"):
        draw_variant("nope", 1)
