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
    return model_audit.audit(model, TEST_SET, submitted(tmp_path, classes))


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
