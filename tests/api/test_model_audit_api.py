"""POST /api/runs/<id>/model/: the platform checks a run's final model (ONNX), stores it and
audits it in the background against the run's last predictions, on test inputs the
evaluator owns; the result is the run's `evaluation.audit`. Refusals store nothing."""

from __future__ import annotations

import io
import time
import warnings

import numpy as np
import pytest
import torch

from mlbench_master.api.models import Run
from mlbench_master.grading import model_files, scoring
from mlbench_worker.shared.evaluation.predictions import digest_of
from mlbench_worker.tasks.cifar10 import synthetic as cifar_synthetic
from tests.api.conftest import worker_client
from tests.api.predictions_bodies import CIFAR, SEED, N, cifar_labels, npz, post

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh(settings, tmp_path):
    settings.MLBENCH_DATA_DIR = tmp_path / "datasets"
    settings.MLBENCH_AUDIT_SAMPLE = 300  # of the 500 examples: a seeded sample
    scoring.forget_evaluators()


@pytest.fixture
def cifar_run(make_run):
    return make_run(state=Run.STARTED, task=CIFAR, seed=SEED, test_examples=N)


def onnx(module, shape=(2, 3, 32, 32), dynamic=True) -> bytes:
    buffer = io.BytesIO()
    axes = {"x": {0: "batch"}, "scores": {0: "batch"}} if dynamic else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module.eval(), (torch.zeros(shape),), buffer, dynamo=False,
            input_names=["x"], output_names=["scores"], dynamic_axes=axes,
        )  # fmt: skip
    return buffer.getvalue()


def linear(classes=10, inputs=3 * 32 * 32):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(inputs, classes))


def predicted_by(module) -> np.ndarray:
    images = cifar_synthetic.generate(SEED, train_size=1, test_size=N).test_x
    with torch.no_grad():
        return module(torch.from_numpy(images).float()).argmax(1).numpy()


def post_model(client, run, body: bytes, query="dataset=synthetic"):
    return client.post(
        f"/api/runs/{run.pk}/model/?{query}", body, content_type="application/octet-stream"
    )


def audited(run, timeout=60.0, read=model_files.audit_of) -> dict:
    """The run's audit as shown (or, with `read`, otherwise) once it is not pending."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = read(run.pk) or {}
        if found.get("status") != "pending":
            return found
        time.sleep(0.1)
    raise AssertionError(f"run {run.pk}'s audit still pending after {timeout} s")


def test_an_honest_model_matches_and_shows_on_the_run(cifar_run, api):
    module = linear()
    classes = predicted_by(module)
    labels = cifar_labels()
    body = npz(digest=digest_of(labels), step=100, predicted_class=classes)
    assert post(worker_client(cifar_run), cifar_run, body).status_code == 201
    model = onnx(module)
    r = post_model(worker_client(cifar_run), cifar_run, model)
    assert r.status_code == 202, r.json()
    assert r.json()["status"] == "pending" and r.json()["step"] == 100
    assert (r.json()["examples"], r.json()["sample"], r.json()["precision"]) == (300, True, "fp32")
    result = audited(cifar_run)
    assert result["status"] == "matches", result
    assert (result["examples"], result["sample"], result["differ"]) == (300, True, 0)
    assert result["sample_seed"] == r.json()["sample_seed"] and result["audits"] == 1
    shown = api.get(f"/api/runs/{cifar_run.pk}/").json()["evaluation"]["audit"]
    assert shown["status"] == "matches" and shown["model_bytes"] == len(model)
    download = api.get(f"/api/runs/{cifar_run.pk}/model/")
    assert download.status_code == 200 and b"".join(download.streaming_content) == model


def test_predictions_the_model_does_not_make_are_a_mismatch_with_the_rows(cifar_run, api, settings):
    module = linear()
    lied = predicted_by(module)
    lied[[5, 250]] = (lied[[5, 250]] + 3) % 10  # two rows the model predicts otherwise
    body = npz(digest=digest_of(cifar_labels()), step=100, predicted_class=lied)
    assert post(worker_client(cifar_run), cifar_run, body).status_code == 201
    settings.MLBENCH_AUDIT_SAMPLE = N  # the whole set: every lie is found
    assert post_model(worker_client(cifar_run), cifar_run, onnx(module)).status_code == 202
    result = audited(cifar_run)
    assert (result["status"], result["differ"], result["first_rows"]) == ("mismatch", 2, [5, 250])
    assert "on 2 of 500 test examples" in result["why"]
    assert api.get(f"/api/runs/{cifar_run.pk}/").json()["evaluation"]["audit"]["status"] == (
        "mismatch"
    )


REFUSED = {  # a model that does not fit, and the words of its refusal
    "not-onnx": (
        lambda: b"\x08\x07 not a model at all",
        "not an ONNX model: wire type 7 at byte 4",
    ),
    "input-shape": (
        lambda: onnx(linear(inputs=3 * 16 * 16), (2, 3, 16, 16)),
        "input is batch x 3 x 16 x 16",
    ),
    "output-shape": (lambda: onnx(linear(classes=7)), "scores of shape 3 x 7 for 3 inputs"),
    "fixed-batch": (lambda: onnx(linear(), dynamic=False), "batch dimension is fixed at 2"),
}


def test_models_that_do_not_fit_are_refused_and_nothing_is_stored(cifar_run, api):
    labels = cifar_labels()
    post(worker_client(cifar_run), cifar_run, npz(digest=digest_of(labels), predicted_class=labels))
    for name, (body, words) in REFUSED.items():
        r = post_model(worker_client(cifar_run), cifar_run, body())
        assert r.status_code == 400, (name, r.json())
        assert words in r.json()["errors"]["model"][0], name
        assert model_files.audit_of(cifar_run.pk) is None
        assert list(model_files.folder(cifar_run.pk).iterdir()) == []
    honest = onnx(linear())
    assert post_model(worker_client(cifar_run), cifar_run, honest).status_code == 202
    before = audited(cifar_run)
    for name, (body, _) in REFUSED.items():  # once a model is stored, nothing replaces it
        r = post_model(worker_client(cifar_run), cifar_run, body())
        assert r.status_code == 409 and "write-once" in r.json()["detail"], name
        assert model_files.model_path(cifar_run.pk).read_bytes() == honest  # the earlier one
        assert model_files.audit_of(cifar_run.pk) == before
        assert sorted(p.name for p in model_files.folder(cifar_run.pk).iterdir()) == [
            "audit.json",
            "model.onnx",
        ]


def test_another_runs_token_no_predictions_and_bad_parameters_are_refused(cifar_run, make_run, api):
    other = make_run(state=Run.FINISHED, task=CIFAR, seed=SEED, test_examples=N)
    r = post_model(worker_client(other), cifar_run, onnx(linear()))
    assert r.status_code == 403 and f"may not post the model of run {cifar_run.pk}" in str(r.json())
    r = post_model(worker_client(cifar_run), cifar_run, onnx(linear()))
    assert r.status_code == 400 and "has no predictions stored" in r.json()["errors"]["model"][0]
    r = post_model(worker_client(cifar_run), cifar_run, onnx(linear()), "dataset=imagenet")
    assert r.status_code == 400 and "dataset" in r.json()["errors"]
    for query, field, words in [
        ("dataset=synthetic&precision=fp8", "precision", "'fp8' is not an evaluation precision"),
        ("dataset=synthetic&step=ten", "step", "'ten' is not a whole number"),
        ("dataset=synthetic&step=-1", "step", "-1 is negative"),
    ]:
        r = post_model(worker_client(cifar_run), cifar_run, onnx(linear()), query)
        assert r.status_code == 400 and words in r.json()["errors"][field][0], r.json()
    assert not model_files.folder(cifar_run.pk).exists() or not any(
        model_files.folder(cifar_run.pk).iterdir()
    )
    shown = api.get(f"/api/runs/{cifar_run.pk}/").json()["evaluation"]["audit"]
    assert shown == {"status": "no model"}
    assert api.get(f"/api/runs/{cifar_run.pk}/model/").status_code == 404


def test_over_the_cap_is_413(cifar_run, settings):
    labels = cifar_labels()
    post(worker_client(cifar_run), cifar_run, npz(digest=digest_of(labels), predicted_class=labels))
    settings.MLBENCH_MODEL_MAX_BYTES = 1000
    r = post_model(worker_client(cifar_run), cifar_run, onnx(linear()))
    assert r.status_code == 413 and "MLBENCH_MODEL_MAX_BYTES" in str(r.json())
    assert model_files.audit_of(cifar_run.pk) is None


def test_a_model_for_another_test_set_than_the_predictions_is_refused(make_run):
    """Task 2's generated set depends on its width: predictions of the 50-feature set and a
    model posted for the default one (2,000) are of two sets, so nothing is audited."""
    from mlbench_worker.shared.evaluation import generated_labels
    from mlbench_worker.tasks.epsilon import synthetic as epsilon_synthetic

    run = make_run(state=Run.STARTED, task="logreg-epsilon", seed=3, test_examples=300)
    torch.manual_seed(0)
    fifty = torch.nn.Linear(50, 1)
    x, _ = epsilon_synthetic.rows(3, "test", 300, np.arange(300), 50)
    with torch.no_grad():
        signs = np.where(fifty(torch.from_numpy(x))[:, 0].numpy() >= 0, 1, -1)
    labels = generated_labels.epsilon(3, 300, 50)
    body = npz(digest=digest_of(labels), step=9, predicted_label=signs)
    assert post(worker_client(run), run, body, "dataset=synthetic&features=50").status_code == 201
    model = onnx(torch.nn.Linear(2000, 1), shape=(2, 2000))
    r = post_model(worker_client(run), run, model)
    assert r.status_code == 400, r.json()
    assert "predictions of step 9 are of another test set" in r.json()["errors"]["model"][0]
    assert model_files.audit_of(run.pk) is None
    r = post_model(worker_client(run), run, onnx(fifty, shape=(2, 50)),
                   "dataset=synthetic&features=50")  # fmt: skip
    assert r.status_code == 202, r.json()
    result = audited(run)  # the model that made the signs, on all 300 rows
    assert (result["status"], result["examples"], result["differ"]) == ("matches", 300, 0), result


def tiny_imagenet(size: int = 20, crop: int = 64) -> tuple[torch.nn.Module, bytes, bytes]:
    """A small conv net of task 1b's shape (crop x crop pixels in, 1,000 scores out), the
    predictions file (step 100) of its evaluation on the first `size` synthetic validation
    images, as the evaluator makes them, and its ONNX file."""
    from mlbench_worker.shared.evaluation import generated_labels, test_sets

    torch.manual_seed(0)
    module = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, stride=4), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
        torch.nn.Linear(4, 1000),
    )  # fmt: skip
    test_set = test_sets.TestSet("resnet50-imagenet", "synthetic", SEED, size)
    images = test_sets.inputs(test_set, np.arange(size), crop)
    with torch.no_grad():
        scores = module(torch.from_numpy(images).float())
    body = npz(
        digest=digest_of(generated_labels.imagenet(size)), step=100,
        predicted_class=scores.argmax(1).numpy(), predicted_top5=scores.topk(5).indices.numpy(),
    )  # fmt: skip
    return module, body, onnx(module, shape=(2, 3, crop, crop))


def test_a_task_1b_model_takes_its_crop_from_its_input_and_is_audited(make_run, api, settings):
    """The master does not know the run's --crop: the model's input says it (N x 3 x 64 x 64
    here), and the evaluator makes the synthetic set's images at that crop itself. A model
    whose crop is not fixed is refused, naming it, and nothing is stored."""
    run = make_run(state=Run.STARTED, task="resnet50-imagenet", seed=SEED, test_examples=20)
    module, body, model = tiny_imagenet()
    assert post(worker_client(run), run, body).status_code == 201
    settings.MLBENCH_AUDIT_SAMPLE_IMAGENET = 12  # task 1b's own sample, not the 300 above
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module, (torch.zeros(2, 3, 64, 64),), buffer, dynamo=False, input_names=["x"],
            dynamic_axes={"x": {0: "batch", 2: "side", 3: "side"}},
        )  # fmt: skip
    r = post_model(worker_client(run), run, buffer.getvalue())
    assert r.status_code == 400, r.json()
    assert r.json()["errors"]["model"][0].startswith(
        "the model's input is batch x 3 x side x side; task 1b's models take float32 N x 3 x S "
        "x S images, S fixed in the model (the run's crop: 64 to 512 pixels)"
    )
    assert not model_files.model_path(run.pk).exists()
    r = post_model(worker_client(run), run, model)
    assert r.status_code == 202, r.json()
    assert (r.json()["examples"], r.json()["sample"]) == (12, True)
    result = audited(run)
    assert (result["status"], result["examples"], result["differ"]) == ("matches", 12, 0), result
    assert model_files.model_path(run.pk).read_bytes() == model
    assert api.get(f"/api/runs/{run.pk}/").json()["evaluation"]["audit"]["status"] == "matches"
