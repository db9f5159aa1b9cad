"""The study score (mlbench_master/results/study_score.py) against hand-computed cases, and
docs/studies.rst's worked example against the code, so the page cannot drift from it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from mlbench_master.results.study_score import (
    INF,
    Outcome,
    held_out_gate,
    median,
    profile,
    profile_area,
    profile_steps,
    ratios,
    score_study,
    summarize,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "studies.rst"


def runs(*seconds: float | None) -> list[Outcome]:
    return [Outcome(s) for s in seconds]


def grid(table: dict[str, dict[str, list[Outcome]]], condition: str = "c") -> dict:
    """{algorithm: {workload: outcomes}} as score_study's cells, in one condition."""
    return {(a, w, condition): out for a, row in table.items() for w, out in row.items()}


# --- medians -----------------------------------------------------------------------------


def test_median_odd_even_and_infinities() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 2.0, 3.0]) == 2.5
    assert median([1.0, INF, 2.0]) == 2.0  # one miss of three: the middle seed still counts
    assert median([1.0, INF, INF]) == INF  # two of three: a miss
    assert median([1.0, 2.0, 3.0, INF]) == 2.5  # one of four: the two middles are finite
    assert median([1.0, 2.0, INF, INF]) == INF  # two of four: a middle is infinite
    with pytest.raises(ValueError, match="no seeds"):
        median([])


def test_summarize_counts_bytes_and_epochs_of_reached_seeds_only() -> None:
    m = summarize([Outcome(10, 100, 2), Outcome(None, 50, 1), Outcome(30, 300, 4)])
    assert (m.seconds, m.bytes, m.epochs, m.seeds, m.reached) == (30, 300, 4, 3, 2)


# --- ratios, profile, area ---------------------------------------------------------------


def test_ratios_ties_and_all_misses() -> None:
    assert ratios({"a": 10.0, "b": 10.0, "c": 25.0}) == {"a": 1.0, "b": 1.0, "c": 2.5}
    assert ratios({"a": INF, "b": INF}) == {"a": INF, "b": INF}
    assert ratios({"a": INF, "b": 7.0}) == {"a": INF, "b": 1.0}


def test_profile_is_a_right_continuous_step_function() -> None:
    rs = [1.0, 2.0, INF]
    assert profile(rs, 1.0) == pytest.approx(1 / 3)
    assert profile(rs, 1.999) == pytest.approx(1 / 3)
    assert profile(rs, 2.0) == pytest.approx(2 / 3)
    assert profile(rs, 1e9) == pytest.approx(2 / 3)  # a miss never enters
    assert profile_steps(rs) == [(1.0, pytest.approx(1 / 3)), (2.0, pytest.approx(2 / 3))]


def test_profile_area_equals_the_hand_area() -> None:
    # rho = 1/4 on [1, 1.5), 2/4 on [1.5, 3), 3/4 on [3, 4]; r = 5 lies beyond tau_max.
    rs = [1.0, 1.5, 3.0, 5.0]
    hand = (0.25 * 0.5 + 0.5 * 1.5 + 0.75 * 1.0) / 3.0
    assert profile_area(rs) == pytest.approx(hand)  # 0.541666...
    # The closed form docs/studies.rst states: mean of max(0, 4 - r) / 3.
    assert profile_area(rs) == pytest.approx(sum(max(0.0, 4 - r) for r in rs) / 4 / 3)
    assert profile_area([1.0, 1.0]) == 1.0
    assert profile_area([INF, 4.0]) == 0.0  # r = tau_max adds a point, not an area


# --- whole studies -----------------------------------------------------------------------


def test_two_algorithms_three_workloads_by_hand() -> None:
    s = score_study(
        grid(
            {
                "x": {"w1": runs(10, 12, 11), "w2": runs(20, None, 22), "w3": runs(5, 5, 5)},
                "y": {"w1": runs(22, 22, 22), "w2": runs(10, 10, 10), "w3": runs(None, None, 9)},
            }
        )
    )
    # x's w2 median is 22 (20, 22, miss), so x: r = (1, 2.2, 1) -> (3 + 1.8 + 3) / 9;
    # y: r = (2, 1, inf) -> (2 + 3 + 0) / 9.
    assert s.ratios[("x", "w2", "c")] == pytest.approx(2.2)
    assert s.ratios[("y", "w3", "c")] == INF
    assert s.by_condition["c"]["x"] == pytest.approx(7.8 / 9)
    assert s.by_condition["c"]["y"] == pytest.approx(5 / 9)
    assert s.overall == s.by_condition["c"]


def test_a_tie_gives_both_the_full_score() -> None:
    s = score_study(grid({"x": {"w": runs(8, 8)}, "y": {"w": runs(7, 9)}}))
    assert s.by_condition["c"] == {"x": 1.0, "y": 1.0}


def test_all_misses_on_a_workload_score_zero_there_for_everyone() -> None:
    s = score_study(
        grid({"x": {"w1": runs(None), "w2": runs(3)}, "y": {"w1": runs(None), "w2": runs(6)}})
    )
    assert s.ratios[("x", "w1", "c")] == s.ratios[("y", "w1", "c")] == INF
    assert s.by_condition["c"]["x"] == pytest.approx(0.5)  # 1 on w2, 0 on w1
    assert s.by_condition["c"]["y"] == pytest.approx((0 + (4 - 2) / 3) / 2)


def test_one_algorithm_scores_one_where_it_reaches() -> None:
    s = score_study(grid({"x": {"w1": runs(50), "w2": runs(70)}}))
    assert s.overall == {"x": 1.0}
    s = score_study(grid({"x": {"w1": runs(50), "w2": runs(None)}}))
    assert s.overall == {"x": 0.5}


def test_a_held_out_miss_removes_the_workload_in_every_condition() -> None:
    cells = {
        **grid({"x": {"w1": runs(10), "w2": runs(10)}, "y": {"w1": runs(5), "w2": runs(20)}}, "c1"),
        **grid({"x": {"w1": runs(10), "w2": runs(10)}, "y": {"w1": runs(5), "w2": runs(20)}}, "c2"),
    }
    ungated = score_study(cells)
    assert ungated.by_condition["c1"]["y"] == pytest.approx((1 + 2 / 3) / 2)
    # y's variant of w1 takes 41 s where x takes 10: more than 4x the best, so y's w1 is
    # infinite everywhere, and x becomes the best on w1 (the gate comes before the best).
    held = {
        ("x", "w1"): runs(10),
        ("y", "w1"): runs(41),
        ("x", "w2"): runs(9),
        ("y", "w2"): runs(30),
    }
    s = score_study(cells, held)
    assert s.held_out_passed == {("x", "w1"): True, ("y", "w1"): False,
                                 ("x", "w2"): True, ("y", "w2"): True}  # fmt: skip
    for c in ("c1", "c2"):
        assert s.times[("y", "w1", c)] == INF
        assert s.ratios[("x", "w1", c)] == 1.0
        assert s.by_condition[c]["y"] == pytest.approx((0 + 2 / 3) / 2)
        assert s.by_condition[c]["x"] == pytest.approx(1.0)
    # Exactly 4x the best passes (r <= tau_max).
    assert held_out_gate({("x", "w"): runs(10), ("y", "w"): runs(40)})[("y", "w")] is True


def test_a_held_out_median_of_misses_fails_and_missing_variants_are_refused() -> None:
    assert held_out_gate({("x", "w"): runs(None, None, 3)})[("x", "w")] is False
    cells = grid({"x": {"w": runs(1)}, "y": {"w": runs(2)}})
    with pytest.raises(ValueError, match="y/w"):
        score_study(cells, {("x", "w"): runs(1)})


def test_missing_cells_and_bad_tau_are_refused() -> None:
    cells = {("x", "w1", "c"): runs(1), ("x", "w2", "c"): runs(1), ("y", "w1", "c"): runs(1)}
    with pytest.raises(ValueError, match="y/w2/c"):
        score_study(cells)
    with pytest.raises(ValueError, match="tau_max"):
        score_study(grid({"x": {"w": runs(1)}}), tau_max=1.0)


# --- docs/studies.rst's worked example ---------------------------------------------------

EXAMPLE_ALGORITHMS = ("allreduce", "powersgd")
EXAMPLE_WORKLOADS = ("resnet20-cifar10", "logreg-epsilon", "gpt-wikitext2")
EXAMPLE = {  # (algorithm, workload, condition) -> seconds of seeds 1, 2, 3 (None: a miss)
    ("allreduce", "resnet20-cifar10", "1gbit"): (40, 42, 45),
    ("allreduce", "logreg-epsilon", "1gbit"): (2.0, 2.2, 2.1),
    ("allreduce", "gpt-wikitext2", "1gbit"): (80, None, None),
    ("powersgd", "resnet20-cifar10", "1gbit"): (60, 66, None),
    ("powersgd", "logreg-epsilon", "1gbit"): (2.1, 2.0, 2.4),
    ("powersgd", "gpt-wikitext2", "1gbit"): (70, 75, 85),
    ("allreduce", "resnet20-cifar10", "10mbit"): (75, 80, 78),
    ("allreduce", "logreg-epsilon", "10mbit"): (3.0, 3.0, 3.0),
    ("allreduce", "gpt-wikitext2", "10mbit"): (None, None, None),
    ("powersgd", "resnet20-cifar10", "10mbit"): (50, 52, 49),
    ("powersgd", "logreg-epsilon", "10mbit"): (2.5, 2.5, 2.6),
    ("powersgd", "gpt-wikitext2", "10mbit"): (None, None, None),
}
EXAMPLE_HELD_OUT = {  # (algorithm, workload) -> seconds of the variant's one seed
    ("allreduce", "resnet20-cifar10"): (50,),
    ("powersgd", "resnet20-cifar10"): (210,),
    ("allreduce", "logreg-epsilon"): (2.0,),
    ("powersgd", "logreg-epsilon"): (2.2,),
    ("allreduce", "gpt-wikitext2"): (None,),
    ("powersgd", "gpt-wikitext2"): (88,),
}


def _number(x: float) -> str:
    return "miss" if math.isinf(x) else f"{x:.4g}"


def example_table() -> str:
    """The worked example's result as docs/studies.rst shows it (an RST simple table)."""
    s = score_study(
        {k: runs(*v) for k, v in EXAMPLE.items()},
        {k: runs(*v) for k, v in EXAMPLE_HELD_OUT.items()},
    )
    rows = []
    for c in s.conditions:
        for a in s.algorithms:
            cells = [
                f"{_number(s.medians[(a, w, c)].seconds)} / {_number(s.times[(a, w, c)])} / "
                f"{_number(s.ratios[(a, w, c)])}"
                for w in s.workloads
            ]
            rows.append([c, a, *cells, f"{s.by_condition[c][a]:.4f}"])
    for a in s.algorithms:
        rows.append(["overall", a, "", "", "", f"{s.overall[a]:.4f}"])
    head = ["condition", "algorithm", "task 1a", "task 2", "task 3b", "score"]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    rule = "  ".join("=" * w for w in widths)

    def line(r: list[str]) -> str:
        return "  ".join(x.ljust(w) for x, w in zip(r, widths, strict=True)).rstrip()

    return "\n".join([rule, line(head), rule, *map(line, rows), rule])


def test_the_worked_example_by_hand() -> None:
    s = score_study(
        {k: runs(*v) for k, v in EXAMPLE.items()},
        {k: runs(*v) for k, v in EXAMPLE_HELD_OUT.items()},
    )
    # powersgd's variant of task 1a (210 s) is more than 4 x allreduce's 50 s: gated out;
    # allreduce never reaches task 3b's variant: gated out there.
    assert not s.held_out_passed[("powersgd", "resnet20-cifar10")]
    assert not s.held_out_passed[("allreduce", "gpt-wikitext2")]
    # 1gbit: allreduce r = (1, 1, inf); powersgd r = (inf, 1, 1).
    assert s.by_condition["1gbit"] == {
        "allreduce": pytest.approx(2 / 3),
        "powersgd": pytest.approx(2 / 3),
    }
    # 10mbit: allreduce r = (1, 3/2.5 = 1.2, inf) -> (1 + 2.8/3) / 3; powersgd (inf, 1, inf).
    assert s.by_condition["10mbit"]["allreduce"] == pytest.approx((1 + 2.8 / 3) / 3)
    assert s.by_condition["10mbit"]["powersgd"] == pytest.approx(1 / 3)


def test_the_doc_shows_the_codes_example_table() -> None:
    table = example_table()
    assert table in DOC.read_text(), f"docs/studies.rst's example table should read:\n{table}"
