"""Task 1b's learning-rate schedules: MLPerf's polynomial one against MLPerf's formula, and
what each schedule records in the summary's config (the keys the MLPerf log states)."""

import pytest

from mlbench_worker.tasks import TASKS
from mlbench_worker.tasks.imagenet.setup import schedule_for
from mlbench_worker.tasks.imagenet.train import CosineSchedule, PolySchedule
from mlbench_worker.training.options import parse_args
from mlbench_worker.training.recipe import Schedule


def mlperf_poly(step: int, base: float, end: float, warmup: int, train_steps: int) -> float:
    """MLPerf's reference, written out from mlcommons/training image_classification/
    tensorflow2/lars_util.py: warm-up `base * step / warmup` while step <= warmup, then
    Keras' PolynomialDecay(base, decay_steps = train_steps - warmup + 1, end, power=2.0)
    of `step - warmup`."""
    if step <= warmup:
        return base * step / warmup
    decay_steps = train_steps - warmup + 1
    done = min(step - warmup, decay_steps)
    return (base - end) * (1 - done / decay_steps) ** 2.0 + end


def test_poly_schedule_is_mlperfs_formula(tmp_path):
    base, end, warmup, total = 0.4, 1e-4, 10, 110
    argv = ["resnet50-imagenet", "--lr-schedule", "poly", "--max-epochs", "11"]
    s = schedule_for(
        parse_args([*argv, "--data-dir", str(tmp_path)]),
        TASKS["resnet50-imagenet"],
        0.1,  # the step schedule's start rate: poly warms up from 0 instead
        base,
        2,  # 2 steps per epoch: 5 warm-up epochs are 10 steps, 11 epochs 22 steps
    )[0]
    assert isinstance(s, PolySchedule) and (s.warmup_steps, s.total_steps) == (10, 22)
    s = PolySchedule(0.0, base, warmup, (), 1.0, end_lr=end, power=2.0, total_steps=total)
    # By hand: warm-up from 0, the peak at its end, (51/101)^2 of the way down half-way.
    assert s(0) == 0 and s(5) == pytest.approx(0.2) and s(10) == pytest.approx(base)
    assert s(60) == pytest.approx((base - end) * (51 / 101) ** 2 + end)
    assert s(111) == pytest.approx(end) and s(500) == pytest.approx(end)  # stays at the end
    assert s.poly_steps == 101
    for step in range(0, 130):
        assert s(step) == pytest.approx(mlperf_poly(step, base, end, warmup, total), rel=1e-12)
    rates = [s(i) for i in range(warmup, 130)]
    assert rates == sorted(rates, reverse=True)


@pytest.mark.parametrize(
    "schedule, kind, expected",
    [
        ("step", Schedule, {"decay_epochs": [30, 60, 80], "decay_factor": 0.1}),
        ("cosine", CosineSchedule, {"end_lr": 0.0, "decay_steps": 90 * 3 - 15}),
        ("poly", PolySchedule, {"end_lr": 1e-4, "poly_power": 2.0, "decay_steps": 90 * 3 - 14}),
    ],
)
def test_each_schedule_records_its_own_parameters(tmp_path, schedule, kind, expected):
    args = parse_args(["resnet50-imagenet", "--lr-schedule", schedule, "--data-dir", str(tmp_path)])
    built, config = schedule_for(args, TASKS["resnet50-imagenet"], 0.1, 0.4, 3)
    assert type(built) is kind and config == expected


def test_the_default_step_schedule_is_unchanged(tmp_path):
    """Goyal et al.'s schedule as before poly existed: warm-up from the one-worker rate,
    divided by 10 at epochs 30, 60 and 80."""
    args = parse_args(["resnet50-imagenet", "--data-dir", str(tmp_path)])
    assert args.lr_schedule == "step"
    s, _ = schedule_for(args, TASKS["resnet50-imagenet"], 0.1, 0.4, 3)
    assert (s.start_lr, s.peak_lr, s.warmup_steps, s.decay_steps) == (0.1, 0.4, 15, (90, 180, 240))
    assert [s(i) for i in (0, 15, 89, 90, 180, 240)] == [0.1, 0.4, 0.4, 0.4 * 0.1, 0.4 * 0.1**2,
                                                          0.4 * 0.1**3]  # fmt: skip
