"""The ONNX audit: a run's exported model, run by the evaluator on inputs it owns, must give the
predictions the run submitted; a model that does not load or does not fit the task's inputs
and outputs is refused, naming the problem."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mlbench_worker.models import build_model
from mlbench_worker.shared.evaluation import model_audit, predictions, test_sets
from mlbench_worker.shared.evaluation.model_audit import Contract, Model, ModelRefused
from mlbench_worker.shared.evaluation.test_sets import TestSet
from mlbench_worker.tasks.cifar10 import synthetic as cifar_synthetic
from mlbench_worker.tasks.epsilon import synthetic as epsilon_synthetic
from mlbench_worker.tasks.epsilon.glm import LinearModel
from mlbench_worker.training.torch_export import RawInputs, onnx_bytes

CIFAR = Contract((3, 32, 32), 10)
WHOLE = {"sample": 10**9, "sample_seed": 0}  # no sample: every row of the set


def submitted(tmp_path, test_set, **arrays):
    labels = test_sets.labels(test_set)
    path = predictions.write(
        tmp_path, test_set_digest=predictions.digest_of(labels), step=7, epoch=1.0,
        elapsed=3.0, **arrays,
    )  # fmt: skip
    return predictions.read(path)


@pytest.fixture(scope="module")
def resnet():
    torch.manual_seed(0)
    model = build_model("resnet20").eval()
    scale, shift = torch.full((3,), 1 / (255 * 0.25)), torch.full((3,), -2.0)
    return RawInputs(model, scale, shift).eval()


def test_a_resnet_exported_by_the_worker_matches_its_own_predictions(tmp_path, resnet):
    test_set = TestSet("resnet20-cifar10", "synthetic", 5, 600)
    images = cifar_synthetic.generate(5, train_size=1, test_size=600).test_x
    with torch.no_grad():
        classes = resnet(torch.from_numpy(images).float()).argmax(1).numpy()
    model = Model(onnx_bytes(resnet, torch.zeros(2, 3, 32, 32)), CIFAR)
    honest = submitted(tmp_path, test_set, predicted_class=classes)
    result = model_audit.audit(model, test_set, honest, **WHOLE)
    assert result == {
        "status": "matches", "examples": 600, "sample": False, "differ": 0, "ties": 0,
        "first_rows": [], "step": 7, "why": "", "precision": "fp32", "tolerance": 1e-6,
    }  # fmt: skip
    lied = classes.copy()
    lied[[3, 400, 599]] = (lied[[3, 400, 599]] + 1) % 10
    result = model_audit.audit(
        model, test_set, submitted(tmp_path, test_set, predicted_class=lied), **WHOLE
    )
    assert result["status"] == "mismatch" and result["differ"] == 3
    assert result["first_rows"] == [3, 400, 599]
    assert "on 3 of 600 test examples" in result["why"]
    # A sample of the set: said in the result, and the same rows for the same sample seed.
    sampled = model_audit.audit(model, test_set, honest, sample=50, sample_seed=9)
    assert (sampled["status"], sampled["examples"], sampled["sample"]) == ("matches", 50, True)
    rows, is_sample = model_audit.rows_to_audit(600, 50, 9)
    assert is_sample and rows.size == 50 and np.array_equal(rows, np.unique(rows))
    assert np.array_equal(rows, model_audit.rows_to_audit(600, 50, 9)[0])
    assert not np.array_equal(rows, model_audit.rows_to_audit(600, 50, 10)[0])


def test_a_linear_model_of_task_2_matches_its_signs(tmp_path):
    features, size = 40, 900
    test_set = TestSet("logreg-epsilon", "synthetic", 3, size, features=features)
    torch.manual_seed(1)
    linear = LinearModel(features)
    with torch.no_grad():
        linear.theta.normal_()
    x, _ = epsilon_synthetic.rows(3, "test", size, np.arange(size), features)
    with torch.no_grad():
        signs = np.where(linear(torch.from_numpy(x)).numpy() >= 0, 1, -1)
    exported = onnx_bytes(linear.export_module(), torch.zeros(2, features))
    model = Model(exported, Contract((features,), None))
    result = model_audit.audit(
        model, test_set, submitted(tmp_path, test_set, predicted_label=signs), **WHOLE
    )
    assert (result["status"], result["examples"], result["differ"]) == ("matches", size, 0)
    signs[10] *= -1
    result = model_audit.audit(
        model, test_set, submitted(tmp_path, test_set, predicted_label=signs), **WHOLE
    )
    assert (result["status"], result["first_rows"]) == ("mismatch", [10])


def test_the_comparison_by_hand_ties_allowed_nothing_else():
    scores = np.array(
        [[0.1, 0.9, 0.0], [0.5, 0.5, 0.2], [0.5, 0.5 + 5e-7, 0.1], [0.3, 0.2, 0.1]],
        dtype=np.float32,
    )
    # Row 1: an exact tie (either class); row 2: within 1e-6; row 3: class 1 is not the top.
    differ, ties = model_audit.compare(scores, np.array([1, 0, 0, 1]))
    assert differ.tolist() == [3] and ties == 1
    differ, ties = model_audit.compare(np.array([0.5, -2e-7, -0.1, 0.0]), np.array([1, 1, 1, -1]))
    assert differ.tolist() == [2] and ties == 2  # -2e-7 and 0.0 (+1) are within 1e-6 of 0


def test_models_that_do_not_fit_are_refused(resnet):
    with pytest.raises(ModelRefused, match="not an ONNX model: field number 0 at byte 2"):
        Model(b"PK\x03\x04 this is a zip, not ONNX", CIFAR)
    with pytest.raises(ModelRefused, match="not an ONNX model onnxruntime can load"):
        Model(b"\x08\x01", CIFAR)  # protobuf, but no graph
    small = onnx_bytes(resnet, torch.zeros(2, 3, 16, 16))  # exported at another size
    with pytest.raises(ModelRefused, match="input is batch x 3 x 16 x 16; the task's inputs"):
        Model(small, CIFAR)
    seven = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, 7))
    with pytest.raises(ModelRefused, match="scores of shape 3 x 7 for 3 inputs; .*N x 10 scores"):
        Model(onnx_bytes(seven, torch.zeros(2, 3, 32, 32)), CIFAR)
    frozen = onnx_bytes(Frozen(), torch.zeros(2, 3, 32, 32))  # dynamic in name only
    with pytest.raises(ModelRefused, match="the model fails on 3 of the task's inputs"):
        Model(frozen, CIFAR)
    fixed = _fixed_batch(seven)
    with pytest.raises(ModelRefused, match="batch dimension is fixed at 2"):
        Model(fixed, CIFAR)
    with pytest.raises(ModelRefused, match="input is batch x 3 x 32 x 32; the task's inputs are "
                       "float32 N x 40 in"):  # fmt: skip
        Model(onnx_bytes(seven, torch.zeros(2, 3, 32, 32)), Contract((40,), None))


class Frozen(torch.nn.Module):
    """Reshapes to the example's batch of 2, as a careless export freezes it."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3 * 32 * 32, 10)

    def forward(self, x):
        return self.linear(x.reshape(2, -1))


def _fixed_batch(module):
    import io
    import warnings

    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.zeros(2, 3, 32, 32),), buffer, dynamo=False)
    return buffer.getvalue()


def test_an_honest_bf16_evaluation_matches_within_its_precisions_tolerance(tmp_path):
    """--amp evaluates in bfloat16 (torch.autocast, as the trainer does on the CPU); the audit
    runs the exported model in float32. Near-ties then fall otherwise on a few rows: within
    bf16's tolerance they are ties, not lies; judged as fp32 they would be a mismatch."""
    test_set = TestSet("resnet20-cifar10", "synthetic", 5, 1000)
    images = cifar_synthetic.generate(5, train_size=1, test_size=1000).test_x
    torch.manual_seed(0)
    linear = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, 10))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        classes = linear(torch.from_numpy(images).float()).float().argmax(1).numpy()
    model = Model(onnx_bytes(linear, torch.zeros(2, 3, 32, 32)), CIFAR)
    honest = submitted(tmp_path, test_set, predicted_class=classes)
    result = model_audit.audit(model, test_set, honest, **WHOLE, precision="bf16")
    assert (result["status"], result["differ"]) == ("matches", 0), result
    assert result["ties"] >= 1  # 4 on this project's machines (the CPU's bf16 kernels decide)
    assert (result["precision"], result["tolerance"]) == ("bf16", 0.05)
    as_fp32 = model_audit.audit(model, test_set, honest, **WHOLE)
    assert (as_fp32["status"], as_fp32["differ"]) == ("mismatch", result["ties"])
    # The tolerance is a gap, not a pass: a class far from the top is still a lie.
    lied = classes.copy()
    lied[10] = np.argsort(model.scores(images[10:11].astype(np.float32))[0])[0]  # the lowest
    result = model_audit.audit(
        model, test_set, submitted(tmp_path, test_set, predicted_class=lied), **WHOLE,
        precision="bf16",
    )  # fmt: skip
    assert (result["status"], result["first_rows"]) == ("mismatch", [10])


def test_the_default_sample_is_2000_rows_of_a_larger_set(tmp_path):
    """The master's default (MLBENCH_AUDIT_SAMPLE unset) on task 1a's 10,000 test images;
    the e2e tests run a smaller sample to stay cheap."""
    from mlbench_worker.shared.evaluation import audit_process

    assert audit_process.SAMPLE == 2000
    test_set = TestSet("resnet20-cifar10", "synthetic", 5, 10_000)
    torch.manual_seed(0)
    linear = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, 10))
    rows, _ = model_audit.rows_to_audit(10_000, audit_process.SAMPLE, 77)
    classes = np.zeros(10_000, np.int64)  # the model's classes on the sample, 0 elsewhere
    with torch.no_grad():
        x = torch.from_numpy(test_sets.inputs(test_set, rows)).float()
        classes[rows] = linear(x).argmax(1).numpy()
    model = Model(onnx_bytes(linear, torch.zeros(2, 3, 32, 32)), CIFAR)
    p = submitted(tmp_path, test_set, predicted_class=classes)
    result = model_audit.audit(model, test_set, p, sample=audit_process.SAMPLE, sample_seed=77)
    assert (result["status"], result["examples"], result["sample"]) == ("matches", 2000, True)
