"""Bad input is refused, never graded, with a message that names the problem."""

from __future__ import annotations

import numpy as np
import pytest

from mlbench_worker.shared.evaluation.evaluator import Evaluator
from mlbench_worker.shared.evaluation.file_labels import LabelsUnavailable
from mlbench_worker.shared.evaluation.predictions import PredictionsRefused, digest_of, read, write
from mlbench_worker.shared.evaluation.test_sets import TestSet, labels

CIFAR = np.array([3, 1, 4, 1, 5, 9, 2, 6])
IMAGENET = np.array([7, 500, 999])
SIGNS = np.array([1, -1, 1, -1])


def header(labels_=CIFAR, **changes):
    values = {
        "format": np.array("mlbench-predictions-1"),
        "test_set_digest": np.array(digest_of(labels_)),
        "step": np.array(10),
        "epoch": np.array(0.25),
        "elapsed": np.array(4.0),
    }
    values.update(changes)
    return values


def grade(tmp_path, task="resnet20-cifar10", labels_=CIFAR, head=None, **arrays):
    path = tmp_path / "p.npz"
    np.savez(path, **(head if head is not None else header(labels_)), **arrays)
    return Evaluator(task, labels_).grade(path)


def refused(tmp_path, match, **kwargs):
    with pytest.raises(PredictionsRefused, match=match) as info:
        grade(tmp_path, **kwargs)
    return str(info.value)


def test_predictions_for_another_test_set(tmp_path):
    other = header(labels_=CIFAR[::-1])  # the same labels in another order: another digest
    message = refused(
        tmp_path, "predictions for another test set", head=other, predicted_class=CIFAR
    )
    assert digest_of(CIFAR)[:16] in message and digest_of(CIFAR[::-1])[:16] in message


def test_a_generated_set_names_itself_in_the_refusal(tmp_path):
    evaluator = Evaluator.of(TestSet("resnet20-cifar10", "synthetic", 42, 8))
    path = tmp_path / "p.npz"
    np.savez(path, **header(), predicted_class=CIFAR)
    with pytest.raises(PredictionsRefused, match=r"generated test set of resnet20-cifar10 \(seed"):
        evaluator.grade(path)


@pytest.mark.parametrize("size", [7, 9])
def test_the_wrong_length(tmp_path, size):
    guess = np.zeros(size, dtype=np.int64)
    refused(
        tmp_path, f"predicted_class has {size} entries; the test set has 8", predicted_class=guess
    )


def test_a_table_where_a_list_belongs(tmp_path):
    refused(
        tmp_path,
        "predicted_class is 8 x 1; the test set has 8 examples",
        predicted_class=CIFAR.reshape(8, 1),
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.bool_, np.str_])
def test_the_wrong_type(tmp_path, dtype):
    refused(tmp_path, "must hold integers", predicted_class=CIFAR.astype(dtype))


def test_nan(tmp_path):
    guess = CIFAR.astype(np.float64)
    guess[5] = np.nan
    refused(tmp_path, "predicted_class holds NaN \\(first at row 5\\)", predicted_class=guess)


@pytest.mark.parametrize("bad", [-1, 10])
def test_a_class_out_of_range(tmp_path, bad):
    guess = CIFAR.copy()
    guess[2] = bad
    refused(
        tmp_path,
        f"row 2 holds {bad}; the classes of resnet20-cifar10 are 0..9",
        predicted_class=guess,
    )


def test_a_task2_label_that_is_not_a_sign(tmp_path):
    refused(
        tmp_path,
        "predicted_label row 1 is 0; labels are -1 or \\+1",
        task="logreg-epsilon",
        labels_=SIGNS,
        predicted_label=np.array([1, 0, 1, -1]),
    )


def test_the_fields_a_task_does_not_take(tmp_path):
    refused(
        tmp_path,
        "takes predicted_label; predicted_label missing; predicted_class not expected",
        task="logreg-epsilon",
        labels_=SIGNS,
        predicted_class=np.array([1, 0, 1, 0]),
    )
    refused(
        tmp_path,
        "predicted_top5 missing",
        task="resnet50-imagenet",
        labels_=IMAGENET,
        predicted_class=IMAGENET,
    )
    refused(
        tmp_path,
        "predicted_top5 not expected",
        predicted_class=CIFAR,
        predicted_top5=np.zeros((8, 5), int),
    )


def test_a_top5_that_contradicts_itself(tmp_path):
    top5 = np.array([[7, 1, 2, 3, 4], [1, 2, 3, 4, 5], [998, 997, 996, 995, 998]])
    imagenet = {"task": "resnet50-imagenet", "labels_": IMAGENET}
    refused(
        tmp_path,
        "row 1 starts with 1, not the predicted class 500",
        **imagenet,
        predicted_class=np.array([7, 500, 998]),
        predicted_top5=top5,
    )
    refused(
        tmp_path,
        "row 2 names a class twice",
        **imagenet,
        predicted_class=top5[:, 0],
        predicted_top5=top5,
    )
    refused(
        tmp_path,
        "predicted_top5 is 3 x 4; the test set has 3 examples, so it must be 3 x 5",
        **imagenet,
        predicted_class=top5[:, 0],
        predicted_top5=top5[:, :4],
    )


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"format": np.array("mlbench-predictions-0")}, "is format 'mlbench-predictions-0'"),
        ({"step": np.array(1.5)}, "'step' must be an integer"),
        ({"epoch": np.array([1.0, 2.0])}, "'epoch' must be a number"),
        ({"elapsed": np.array(np.nan)}, "elapsed nan must be seconds"),
        ({"step": np.array(-1)}, "must not be negative"),
        ({"test_set_digest": np.array(5)}, "'test_set_digest' must be a text"),
        ({"comment": np.array("hi")}, "unknown fields comment"),
    ],
)
def test_a_header_out_of_format(tmp_path, change, match):
    refused(tmp_path, match, head=header(**change), predicted_class=CIFAR)


def test_a_header_field_missing(tmp_path):
    head = header()
    del head["elapsed"]
    refused(tmp_path, "lacks elapsed", head=head, predicted_class=CIFAR)


def test_no_predictions_at_all(tmp_path):
    refused(tmp_path, "holds no predictions")


def test_files_that_are_not_npz(tmp_path):
    text = tmp_path / "p.npz"
    text.write_text("val_accuracy 0.99\n")
    with pytest.raises(PredictionsRefused, match="cannot be read as a .npz file"):
        read(text)
    single = tmp_path / "one.npy"
    np.save(single, CIFAR)
    with pytest.raises(PredictionsRefused, match="a single .npy array, not a .npz file"):
        read(single)
    pickled = tmp_path / "obj.npz"
    np.savez(pickled, **header(), predicted_class=np.array([object()] * 8, dtype=object))
    with pytest.raises(PredictionsRefused, match="cannot be read as a .npz file"):
        read(pickled)


@pytest.mark.parametrize(
    ("test_set", "error", "match"),
    [
        (
            TestSet("resnet21-cifar10", "synthetic", 1, 5),
            ValueError,
            "task 'resnet21-cifar10' is not known",
        ),
        (TestSet("backend-benchmark", "synthetic", 1, 5), ValueError, "has no test set"),
        (
            TestSet("resnet20-cifar10", "epsilon", 1, 5),
            ValueError,
            "not one of resnet20-cifar10's: cifar10 or synthetic",
        ),
        (TestSet("resnet20-cifar10", "synthetic", 1, 0), ValueError, "a test set of 0 examples"),
        (
            TestSet("resnet50-imagenet", "imagenet", 1, 5, "/nowhere"),
            LabelsUnavailable,
            "development kit at /nowhere/imagenet/ILSVRC2012_devkit_t12.tar.gz, which is not",
        ),
    ],
)
def test_test_sets_that_cannot_be_graded(test_set, error, match):
    with pytest.raises(error, match=match):
        labels(test_set)


def test_the_writer_refuses_what_the_evaluator_would(tmp_path):
    with pytest.raises(
        PredictionsRefused, match="predicted_class is float32; the format holds integers"
    ):
        write(
            tmp_path,
            test_set_digest="x",
            step=1,
            epoch=0,
            elapsed=0,
            predicted_class=np.zeros(3, np.float32),
        )
    with pytest.raises(PredictionsRefused, match="nothing to write"):
        write(tmp_path, test_set_digest="x", step=1, epoch=0, elapsed=0)
    assert list(tmp_path.iterdir()) == []
