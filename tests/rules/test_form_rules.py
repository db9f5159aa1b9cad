"""The New run form's rules and the API's, held to the same cases (form_cases.json), and the
lists GET /api/runs/defaults/ serves for the dashboard held to the master's own rules.

The form keeps no list of its own: it applies what the defaults endpoint serves
(static/dashboard/js/form_rules.js). Each case runs twice: the JavaScript on the served
answer (conftest.py's `js`), and here the API's own rules (`run_rules.resolve`, what POST
/api/runs/ applies). A case fails when either side changes alone: the master starting to
accept what the form does not offer, or to refuse what it offers; the served answer or the
form's code saying something else than the case. The run states the run page reads are
held to what the master does with a run in each state.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from mlbench_master import run_rules
from mlbench_master.api.models import Metric, Run
from mlbench_master.runs import lifecycle
from mlbench_worker.shared import algorithm_catalogue, catalogue
from tests.checkpoints import IDENTITY
from tests.rules.conftest import served_defaults

HERE = Path(__file__).resolve().parent
CASES = json.loads((HERE / "form_cases.json").read_text())
MEASUREMENT = "backend-benchmark"


def _ids(cases: list[dict]) -> list[str]:
    names = [c["name"] for c in cases]
    assert len(set(names)) == len(names), "case names must be unique"
    return names


def _resolve(request: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, list[str]]]:
    """What the API makes of `request` (as lifecycle.create_run resolves it: with this master's
    cluster limits): the run's fields, or None and what it refuses."""
    try:
        filled = run_rules.fill(request)
        return run_rules.resolve(filled, None, run_rules.cluster_limits(filled)), {}
    except run_rules.RunRefused as exc:
        return None, exc.errors


def _refused(request: dict[str, Any]) -> dict[str, list[str]]:
    return _resolve(request)[1]


@pytest.fixture
def gpus(settings):
    """A cluster that offers GPUs, so a case may tick "Use GPUs" as the form lets it."""
    settings.MLBENCH_MAX_GPUS = 1


# ------------------------------------------------------------------------------- backends


BACKENDS = CASES["backends"]


@pytest.mark.parametrize("case", BACKENDS, ids=_ids(BACKENDS))
def test_backends_python(case, gpus):
    base = {"task": case["task"], "gpu_enabled": case["gpu"]}
    measuring = catalogue.is_measurement(case["task"])
    if not measuring:  # a measurement has no implementation (refused by name)
        base["implementation"] = case["implementation"]
    offered, chosen = case["expected"]["offered"], case["expected"]["chosen"]
    default = run_rules.DEFAULTS["backend"]
    for backend in Run.BACKENDS:
        errors = _refused({**base, "backend": backend})
        # One that takes no backend tolerates the table's own, which clients send.
        allowed = backend in offered or (not offered and backend == default)
        assert ("backend" in errors) != allowed, (backend, errors)
    fields, errors = _resolve(base)
    assert "backend" not in errors, errors
    if measuring:  # "every backend": the master measures each of the device's
        assert chosen == "" and fields["backend"] == ",".join(b for b in offered if b)
    elif offered:
        assert fields is not None and fields["backend"] == chosen, errors
    else:
        assert chosen is None


@pytest.mark.parametrize("case", BACKENDS, ids=_ids(BACKENDS))
def test_backends_javascript(case, js):
    assert js["form"]["backends"][case["name"]] == case["expected"]


# ----------------------------------------------------------------------------- algorithms


ALGORITHMS = CASES["algorithms"]


@pytest.mark.parametrize("case", ALGORITHMS, ids=_ids(ALGORITHMS))
def test_algorithms_python(case):
    for name in algorithm_catalogue.ALGORITHMS:
        request = {"task": case["task"], "implementation": case["implementation"]}
        errors = _refused({**request, "algorithm": name})
        # (its options' bounds, e.g. the workers a decentralized run needs, are another rule)
        refused = {"algorithm", "implementation"} & set(errors)
        assert bool(refused) != (name in case["expected"]), (name, errors)


@pytest.mark.parametrize("case", ALGORITHMS, ids=_ids(ALGORITHMS))
def test_algorithms_javascript(case, js):
    assert js["form"]["algorithms"][case["name"]] == case["expected"]


# ------------------------------------------------------------------------------- data sets


DATASETS = CASES["datasets"]


@pytest.mark.parametrize("case", DATASETS, ids=_ids(DATASETS))
def test_datasets_python(case):
    for name in catalogue.dataset_names():
        errors = _refused({"task": case["task"], "dataset": name})
        assert ("dataset" in errors) != (name in case["expected"]), (name, errors)


@pytest.mark.parametrize("case", DATASETS, ids=_ids(DATASETS))
def test_datasets_javascript(case, js):
    assert js["form"]["datasets"][case["name"]] == case["expected"]


# ------------------------------------------------------------- the fields a measurement refuses


REFUSED = CASES["refused_fields"]


def _checkpointed(task: str, state: str = Run.CANCELLED) -> Run:
    """A run of `task` (2 workers) in `state` that wrote a checkpoint, as its rank 0 says."""
    info = catalogue.get(task)
    run = Run.objects.create(name=f"{task} {state}", task=task, state=state, num_workers=2)
    identity = {**IDENTITY, "task": task, "model": info.model, "batch_size": info.batch_size}
    Metric.objects.create(
        run=run,
        name=run_rules.CHECKPOINT_METRIC,
        value=1.0,
        date=dt.datetime.now(dt.UTC),
        metadata={"epoch": 1, "step": 98, "elapsed": 60.0, "identity": identity},
    )
    return run


def _given(task: str) -> dict[str, Any]:
    """For each field only a training run takes, a value other than the one every client
    sends, that a training run of `task` may ask for."""
    return {
        "target": "standard",
        "light_target": True,
        "dataset": "synthetic",
        "max_epochs": 3,
        "resume_from": _checkpointed(task).pk,
        "algorithm": "allreduce",
        "algorithm_options": {"precision": "fp32"},
        "implementation": "reference",
        "lr_schedule": "step",
        "test_examples": 100,
        "train_examples": 1000,
        "batch_size": 32,
    }


@pytest.mark.django_db
@pytest.mark.parametrize("case", REFUSED, ids=_ids(REFUSED))
def test_refused_fields_python(case):
    training_only = served_defaults()["training_only"]
    measuring = catalogue.is_measurement(case["task"])
    given = _given("resnet50-imagenet" if measuring else case["task"])
    assert set(training_only) <= set(given), "give a value for each field served"
    for name in training_only:
        errors = _refused({"task": case["task"], name: given[name]})
        if name in case["expected"]:
            assert name in errors, (name, errors)
        else:  # taken: the whole request passes (a resumed one is checked only then)
            assert errors == {}, (name, errors)


@pytest.mark.parametrize("case", REFUSED, ids=_ids(REFUSED))
def test_refused_fields_javascript(case, js):
    assert js["form"]["refused_fields"][case["name"]] == case["expected"]


def test_a_measurement_takes_every_other_field_and_the_defaults_clients_send(gpus):
    """The served list is not too long either: what a measurement is asked for beyond it
    (and the defaults every client sends for the fields on it) passes."""
    others = {
        "num_workers": 2, "num_cpus": 1.0, "max_bandwidth": 100, "latency": 5.0,
        "backend": "gloo", "gpu_enabled": True, "time_budget": 30.0, "time_limit": 1000,
        "seed": 7, "dataset": "auto", "light_target": False,
    }  # fmt: skip
    assert set(others) & set(served_defaults()["training_only"]) == {"dataset", "light_target"}
    assert {k: run_rules.DEFAULTS[k] for k in ("dataset", "light_target")} == {
        "dataset": "auto", "light_target": False,
    }  # fmt: skip
    assert _refused({"task": MEASUREMENT, **others}) == {}


# ------------------------------------------------------------------------------ run states


@pytest.mark.django_db
def test_the_served_run_states_are_what_the_master_does_with_a_run(redis_settings):
    """active: the run holds the workers; final: nothing changes it any more (cancelling
    does nothing); resumable: a new run may continue its checkpoint. The run page reads
    these to poll, offer Cancel and offer Resume."""
    states = served_defaults()["run_states"]
    for state, _ in Run.STATES:  # (the queued one first: no other is started as it leaves)
        run = Run.objects.create(name=f"a {state} run", state=state)
        assert run.is_active == (state in states["active"]), state
        assert lifecycle.cancel_run(run) == (state not in states["final"]), state
    for state, _ in Run.STATES:
        parent = _checkpointed(catalogue.DEFAULT_TASK, state)
        errors = _refused({"resume_from": parent.pk})
        if state in states["resumable"]:
            assert errors == {}, (state, errors)
        else:
            assert "resume_from" in errors, (state, errors)
        parent.delete()  # one active run at most (the database's constraint)
