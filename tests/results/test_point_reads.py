"""A run's result read with PostgreSQL's sums of its training points (point_reads.py) is the
result read from every point in Python, to the last bit: the time split's step-weighted
means (steps missing, true, text, fractional, repeated or going back) and the
throughput's mean where no summary gives it."""

from __future__ import annotations

import datetime as dt
import random

import pytest

from mlbench_master.api.models import Metric, Run
from mlbench_master.results import point_reads, stored

pytestmark = pytest.mark.django_db
START = dt.datetime(2026, 11, 1, 12, 0, 0, tzinfo=dt.UTC)


def _points(run: Run, name: str, steps: list, rng: random.Random) -> None:
    for i, step in enumerate(steps):
        meta = {"step": step, "elapsed": 10.0 * i} if step != "absent" else {"elapsed": 1.0}
        Metric.objects.create(run=run, name=name, value=rng.uniform(0.001, 3.0),
                              date=START + dt.timedelta(seconds=i), metadata=meta)  # fmt: skip


@pytest.fixture
def runs() -> list[Run]:
    rng = random.Random(49)
    awkward = [50, 100, 100, 80, 130.7, None, "200", True, "absent", 0, 10**15, -5, 400]
    made = []
    for k in range(4):
        run = Run.objects.create(name=f"run {k}", task="resnet20-cifar10", num_workers=2,
                                 state=Run.FAILED, summary={})  # fmt: skip
        for name in stored.TIMINGS[: k + 1]:
            _points(run, name, awkward if k % 2 else [50 * (i + 1) for i in range(30)], rng)
        _points(run, "images_per_sec", [50 * (i + 1) for i in range(7 + k)], rng)
        _points(run, "val_accuracy", [200, 400], rng)
        made.append(run)
    made.append(Run.objects.create(name="no points", task="resnet20-cifar10", state=Run.FAILED))
    # Metadata that is not an object: a step of 0, as time_split reads it.
    Metric.objects.create(run=made[0], name=stored.TIMINGS[0], value=0.5,
                          date=START + dt.timedelta(hours=1), metadata=[1, 2])  # fmt: skip
    return made


def _in_python(runs: list[Run], monkeypatch) -> list:
    with monkeypatch.context() as m:
        m.setattr(point_reads, "available", lambda: False)
        return [s.result() for s in stored.load(runs)]


def test_postgresql_sums_give_the_results_python_gives(runs, monkeypatch):
    assert point_reads.available()  # the tests' database is PostgreSQL
    made = stored.load(runs)
    assert all(s.split_means is not None for s in made)  # the sums were PostgreSQL's
    assert not any(n in s.points for s in made for n in stored.TIMINGS)  # no timing points read
    summed = [s.result() for s in made]
    read = _in_python(runs, monkeypatch)
    assert summed == read  # every field, floats compared exactly
    assert [len(r.time_split) for r in summed] == [1, 2, 3, 3, 0]
    assert all(r.throughput is not None for r in summed[:4]) and summed[4].throughput is None


def test_the_weights_are_the_steps_each_point_covers(runs):
    """Steps 50, 100, 100 (weight at least 1), 80 (back: 1), 130.7 (130 - 80 = 50)..."""
    pts = stored.load([runs[1]])[0]
    name = stored.TIMINGS[0]
    values = [v for v, _ in point_reads.points_of([runs[1].pk], [name])[runs[1].pk][name]]
    steps = [50, 100, 100, 80, 130, 0, 200, 1, 0, 0, 10**15, -5, 400]
    previous, total, weights = 0, 0.0, 0.0
    for value, step in zip(values, steps, strict=True):
        weight = max(step - previous, 1)
        previous = step
        total += value * weight
        weights += weight
    assert pts.split_means[name] == total / weights


def test_only_a_whole_results_read_is_summed(runs):
    """A reader of the grades only (GRADING) gets its points as before, metadata and all."""
    graded = stored.load(runs, stored.GRADING)
    assert all(s.split_means is None for s in graded)
    assert graded[0].points["val_accuracy"][0][1]["step"] == 200
