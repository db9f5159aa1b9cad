"""Task 1b's ONNX audit at unit level: a ResNet exported as the worker exports it (its
normalisation wrapped around it) matches the predictions the worker's own evaluation
pipeline made of the synthetic set's JPEG files, on the inputs the evaluator makes itself;
a model with other weights is a mismatch. The contract takes the crop S from the model's
declared input and refuses what is not N x 3 x S x S with S one of the crops a run takes."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
import torch

from mlbench_worker.models import build_imagenet_model
from mlbench_worker.shared.evaluation import audit_process, model_audit, predictions, test_sets
from mlbench_worker.shared.evaluation.model_audit import Model, ModelRefused
from mlbench_worker.shared.evaluation.test_sets import TestSet
from mlbench_worker.shared.imagenet_rules import eval_resize
from mlbench_worker.tasks.imagenet import synthetic
from mlbench_worker.tasks.imagenet.pipeline import ImageBatches
from mlbench_worker.training.torch_export import exportable, onnx_bytes

SIZE, CROP, SEED = 24, 64, 3
TEST_SET = TestSet("resnet50-imagenet", "synthetic", SEED, SIZE)
CONTRACT = model_audit.contract_of(TEST_SET)
WHOLE = {"sample": 10**9, "sample_seed": 0}


def resnet(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)  # random weights whose classes differ from image to image
    return build_imagenet_model("resnet18", zero_init_residual=False).eval()


@pytest.fixture(scope="module")
def test_data(tmp_path_factory):
    """The worker's evaluation batches of the first SIZE synthetic validation images at a
    64-pixel crop, read from the JPEG files the run's generator wrote."""
    data = tmp_path_factory.mktemp("data")
    synthetic.ensure(data, 1, SIZE, say=lambda _m: None)
    split = synthetic.split(data, "val", SIZE)
    return ImageBatches(split, 8, train=False, crop=CROP, resize=eval_resize(CROP))


def worker_predictions(folder, model, test_data) -> predictions.Predictions:
    """The predictions file the worker's evaluation writes for `model` (its classes and
    top 5, in the set's order)."""
    with torch.no_grad():
        scores = torch.cat([model(x) for x, _ in test_data.iterate(np.arange(SIZE))])
    labels = test_sets.labels(TEST_SET)
    path = predictions.write(
        folder, test_set_digest=predictions.digest_of(labels), step=9, epoch=1.0,
        elapsed=2.0, predicted_class=scores.argmax(1).numpy(),
        predicted_top5=scores.topk(5, dim=1).indices.numpy(),
    )  # fmt: skip
    return predictions.read(path)


def exported(model, test_data) -> bytes:
    module, example = exportable(model, test_data)  # as torch_export.export_final does
    return onnx_bytes(module, example)


@pytest.fixture(scope="module")
def honest(tmp_path_factory, test_data):
    """ResNet-18 (random weights): the worker's predictions file of it, and its export."""
    folder = tmp_path_factory.mktemp("run")
    model = resnet(0)
    return folder, worker_predictions(folder, model, test_data), exported(model, test_data)


def test_a_model_exported_as_the_worker_does_matches_its_pipelines_predictions(honest):
    folder, submitted, data = honest
    onnx = Model(data, CONTRACT)
    assert onnx.contract.shape == (3, CROP, CROP) and onnx.contract.crop == CROP
    result = model_audit.audit(onnx, TEST_SET, submitted, **WHOLE)
    assert (result["status"], result["examples"], result["differ"]) == ("matches", SIZE, 0)
    # The same through the bounded child process the master and `mlbench evaluate` use,
    # on a sample.
    (folder / "model.onnx").write_bytes(data)
    request = audit_process.request_of(
        TEST_SET, mode="audit", model=folder / "model.onnx",
        predictions=next(folder.glob("predictions-*.npz")), sample=10, sample_seed=5,
        precision="fp32",
    )  # fmt: skip
    answer = audit_process.run(request, audit_process.Limits())
    assert (answer["result"]["status"], answer["result"]["examples"]) == ("matches", 10), answer


def test_a_model_with_other_weights_than_its_predictions_is_a_mismatch(honest, test_data):
    _, submitted, _ = honest
    other = Model(exported(resnet(1), test_data), CONTRACT)
    result = model_audit.audit(other, TEST_SET, submitted, **WHOLE)
    assert result["status"] == "mismatch" and result["differ"] > SIZE // 2, result
    assert f"of {SIZE} test examples" in result["why"]


class Tiny(torch.nn.Module):
    """Any image size and channel count in, 1,000 scores out."""

    def __init__(self, channels=3):
        super().__init__()
        self.conv = torch.nn.Conv2d(channels, 4, 3, stride=4)
        self.head = torch.nn.Linear(4, 1000)

    def forward(self, x):
        return self.head(self.conv(x).mean(dim=(2, 3)))


def tiny_onnx(shape, dynamic_image=False) -> bytes:
    axes = {0: "batch", 2: "height", 3: "width"} if dynamic_image else {0: "batch"}
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Tiny(shape[1] if len(shape) == 4 else 3).eval(), (torch.zeros(shape),), buffer,
            dynamo=False, input_names=["x"], output_names=["scores"],
            dynamic_axes={"x": axes, "scores": {0: "batch"}},
        )  # fmt: skip
    return buffer.getvalue()


@pytest.mark.parametrize(("side", "rows"), [(64, 125), (224, 10), (512, 1)])
def test_the_contract_takes_the_crop_from_the_model(side, rows):
    model = Model(tiny_onnx((2, 3, side, side)), CONTRACT)
    assert model.contract.shape == (3, side, side) and model.contract.crop == side
    assert model.contract.rows_per_batch() == rows  # the batches shrink as images grow
    assert CONTRACT.crop == 224  # the task's own, until fitted to a model


WANTED = r"task 1b's models take float32 N x 3 x S x S images, S fixed in the model \(the run's crop: 64 to 512 pixels\)"  # noqa: E501


@pytest.mark.parametrize(
    ("shape", "dynamic", "shown"),
    [
        ((2, 3, 64, 80), False, "batch x 3 x 64 x 80"),  # not square
        ((2, 1, 64, 64), False, "batch x 1 x 64 x 64"),  # one channel
        ((2, 3, 96, 96), True, "batch x 3 x height x width"),  # S not fixed
        ((2, 3, 32, 32), False, "32 x 32 pixels"),  # below the smallest crop
        ((2, 3, 520, 520), False, "520 x 520 pixels"),  # above the largest
    ],
)
def test_a_model_whose_input_is_not_n_x_3_x_s_x_s_is_refused_naming_it(shape, dynamic, shown):
    with pytest.raises(ModelRefused, match=f"the model's input is {shown}; {WANTED}"):
        Model(tiny_onnx(shape, dynamic), CONTRACT)


def test_a_flat_input_is_refused_too():
    flat = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 1000))
    with pytest.raises(ModelRefused, match=f"the model's input is batch x 12; {WANTED}"):
        Model(onnx_bytes(flat, torch.zeros(2, 12)), CONTRACT)


def test_task_1b_is_audited_on_a_sample_of_500_by_default():
    """The default docs/checking.rst measured (about 45 s at 224 pixels here), smaller than
    the other tasks' 2,000: a sample of 50,000 validation images, sorted, all different."""
    assert (audit_process.SAMPLE_IMAGENET, audit_process.SAMPLE) == (500, 2000)
    rows, sampled = model_audit.rows_to_audit(50_000, audit_process.SAMPLE_IMAGENET, 11)
    assert sampled and rows.size == 500 and np.array_equal(rows, np.unique(rows))
    assert 1 - 0.99**500 > 0.993  # what it finds of a model that disagrees on 1 % of rows
