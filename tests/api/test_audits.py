"""The model audits behind one interface (mlbench_master/grading/audits.py): the upload view
asks which audit grades the run's task and calls it without knowing which it got, so an
audit for a new task is one class registered in one place."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mlbench_master.api.models import Run
from mlbench_master.grading import audits, model_auditing, perplexity_audit, scoring
from mlbench_worker.shared.evaluation import audit_process
from tests.api.conftest import worker_client
from tests.api.test_model_audit_api import post_model

pytestmark = pytest.mark.django_db


class ToyAudit:
    """Grades every model of task 1a by its size: enough to see the view call it."""

    name = "toy"

    def __init__(self) -> None:
        self.checked: list[tuple] = []

    def applies_to(self, task: str) -> bool:
        return task == "resnet20-cifar10"

    def limits(self) -> audit_process.Limits:
        return audit_process.Limits(1.0, 64)

    def check(self, run: Run, dataset: str, features: int | None, precision: str) -> None:
        if dataset != "synthetic":
            raise scoring.SetRefused("dataset", "the toy audit grades generated sets only")
        self.checked.append((run.pk, dataset, precision))

    def intake(
        self, run: Run, tmp: Path, dataset: str, features: int | None, step: int | None,
        precision: str,
    ) -> dict[str, Any]:  # fmt: skip
        return {"status": "toy", "kind": self.name, "model_bytes": tmp.stat().st_size}


def test_each_task_gets_its_audit():
    assert audits.for_task("gpt-wikitext2").intake is perplexity_audit.intake
    assert audits.for_task("awd-lstm-wikitext2").name == "perplexity"
    for task in ("resnet20-cifar10", "logreg-epsilon", "resnet50-imagenet"):
        assert audits.for_task(task).intake is model_auditing.intake


def test_an_audit_registered_in_one_place_is_what_the_view_calls(make_run):
    run = make_run(state=Run.STARTED, task="resnet20-cifar10")
    toy = ToyAudit()
    with audits.registered(toy):
        assert audits.for_task("resnet20-cifar10") is toy
        r = post_model(worker_client(run), run, b"any model's bytes")
        assert r.status_code == 202, r.json()
        assert r.json() == {"status": "toy", "kind": "toy", "model_bytes": 17}
        assert toy.checked == [(run.pk, "synthetic", "fp32")]
        r = post_model(worker_client(run), run, b"x", "dataset=cifar10")  # its own refusal
        assert r.status_code == 400 and "generated sets only" in r.json()["errors"]["dataset"][0]
    assert audits.for_task("resnet20-cifar10").name == "predictions"
