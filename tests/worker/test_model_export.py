"""The final model each implementation exports (training/torch_export.py, the reference and
torch-ddp; implementations/tensorflow/keras_export.py) takes the raw test inputs and, run by
the evaluator's audit, gives exactly the classes the run's own evaluation computed from its
normalised batches. Whole runs that export: tests/e2e/test_implementations.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mlbench_worker.data.images import channel_stats
from mlbench_worker.data.loader import Batches
from mlbench_worker.models import build_model
from mlbench_worker.shared.evaluation import model_audit, predictions, test_sets
from mlbench_worker.shared.evaluation.test_sets import TestSet
from mlbench_worker.tasks.cifar10 import synthetic
from mlbench_worker.training.torch_export import exportable, onnx_bytes

SEED, SIZE = 11, 400
TEST_SET = TestSet("resnet20-cifar10", "synthetic", SEED, SIZE)


def submitted(tmp_path, classes):
    labels = test_sets.labels(TEST_SET)
    path = predictions.write(
        tmp_path, test_set_digest=predictions.digest_of(labels), step=1, epoch=1.0, elapsed=1.0,
        predicted_class=np.asarray(classes, np.int64),
    )  # fmt: skip
    return predictions.read(path)


def audit(data: bytes, tmp_path, classes) -> dict:
    model = model_audit.Model(data, model_audit.contract_of(TEST_SET))
    return model_audit.audit(
        model, TEST_SET, submitted(tmp_path, classes), sample=SIZE, sample_seed=0
    )


def test_the_reference_model_behind_its_normalisation_gives_its_own_scores(tmp_path):
    arrays = synthetic.generate(SEED, train_size=2_000, test_size=SIZE)
    mean, std = channel_stats(arrays.train_x)
    batches = Batches(arrays.test_x, arrays.test_y, 100, mean, std, augment=False)
    torch.manual_seed(3)
    model = build_model("resnet20")
    model(batches.normalize(torch.from_numpy(arrays.train_x[:256])))  # running statistics
    model.eval()
    with torch.no_grad():  # the trainer's evaluation: normalised batches
        scores = torch.cat([model(x) for x, _ in batches.iterate(np.arange(SIZE))]).numpy()
    module, example = exportable(model, batches)
    assert example.shape == (2, 3, 32, 32) and model.training is False
    data = onnx_bytes(module, example)
    contract = model_audit.contract_of(TEST_SET)
    raw = arrays.test_x.astype(np.float32)
    np.testing.assert_allclose(model_audit.Model(data, contract).scores(raw), scores, atol=1e-4)
    result = audit(data, tmp_path, scores.argmax(1))
    assert (result["status"], result["examples"], result["differ"]) == ("matches", SIZE, 0)
    # Without the run's normalisation the same weights give other scores: the wrapper is
    # what makes the raw inputs right (a planted defect).
    bare = model_audit.Model(onnx_bytes(model, example), contract).scores(raw)
    assert np.abs(bare - scores).max() > 0.1


@pytest.mark.slow  # TensorFlow's import and tf2onnx's conversion: 15 s and more (run by make test)
def test_the_keras_model_behind_its_transpose_and_normalisation_gives_its_own_scores(tmp_path):
    pytest.importorskip("tensorflow")
    pytest.importorskip("tf2onnx")
    from mlbench_worker.implementations.tensorflow.data import ImageBatches
    from mlbench_worker.implementations.tensorflow.keras_export import onnx_bytes as keras_onnx
    from mlbench_worker.implementations.tensorflow.model import build_model as keras_model

    arrays = synthetic.generate(SEED, train_size=2_000, test_size=SIZE)
    mean, std = channel_stats(arrays.train_x)
    batches = ImageBatches(arrays.test_x, arrays.test_y, 100, mean, std, augment=False)
    model = keras_model("resnet20")
    scores = np.concatenate(
        [model(x, training=False).numpy() for x, _ in batches.iterate(np.arange(SIZE))]
    )
    data = keras_onnx(model, batches.scale, batches.shift)
    exported = model_audit.Model(data, model_audit.contract_of(TEST_SET))
    np.testing.assert_allclose(exported.scores(arrays.test_x.astype(np.float32)), scores, atol=1e-4)
    result = audit(data, tmp_path, scores.argmax(1))
    assert (result["status"], result["examples"], result["differ"]) == ("matches", SIZE, 0)


def test_task_2_trains_with_its_fused_forward_and_exports_a_product_and_a_sum(monkeypatch):
    """Training keeps torch.addmv (its numerics are the benchmark's); the export, which has
    no addmv, goes through the model's export module: the same scores up to rounding."""
    from mlbench_worker.tasks.epsilon.glm import LinearModel

    torch.manual_seed(0)
    linear = LinearModel(6)
    with torch.no_grad():
        linear.theta.normal_()
    x = torch.randn(5, 6)
    calls, addmv = [], torch.addmv
    monkeypatch.setattr(torch, "addmv", lambda *a, **k: calls.append(1) or addmv(*a, **k))
    trained = linear(x)
    assert calls == [1]
    exported = linear.export_module()
    torch.testing.assert_close(exported(x), trained)
    assert calls == [1]  # the export module computes without addmv
    model = model_audit.Model(
        onnx_bytes(exported, torch.zeros(2, 6)), model_audit.Contract((6,), None)
    )
    np.testing.assert_allclose(model.scores(x.numpy()), trained.detach().numpy(), atol=1e-5)


def test_the_precision_sent_with_the_model_is_the_evaluations():
    from types import SimpleNamespace

    from mlbench_worker.training.torch_export import precision_of

    cpu = torch.device("cpu")
    assert precision_of(SimpleNamespace(amp_dtype=torch.bfloat16, device=cpu)) == "bf16"  # --amp
    assert precision_of(SimpleNamespace(amp_dtype=torch.float16, device=cpu)) == "fp16"
    assert precision_of(SimpleNamespace(amp_dtype=None, device=cpu)) == "fp32"
