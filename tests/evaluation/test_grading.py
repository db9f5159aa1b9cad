"""The evaluator's grade of fixed predictions files equals a count done by hand.

The files are written with numpy's own `np.savez` (not with the project's writer), as any
solver's code would write them; the labels are fixed here, or a generated test set's first
labels pinned from its seed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mlbench_worker.shared.evaluation import predictions
from mlbench_worker.shared.evaluation.evaluator import Evaluator
from mlbench_worker.shared.evaluation.predictions import digest_of
from mlbench_worker.shared.evaluation.test_sets import TestSet


def savez(path, labels, **arrays):
    """A predictions file as docs/checking.rst tells anyone to write one."""
    np.savez(
        path,
        format=np.array("mlbench-predictions-1"),
        test_set_digest=np.array(digest_of(labels)),
        step=np.array(390),
        epoch=np.array(1.0),
        elapsed=np.array(61.25),
        **arrays,
    )
    return path


def test_top1_of_a_fixed_file_is_the_share_counted_by_hand(tmp_path):
    labels = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3])
    # Wrong at rows 3, 7 and 8: 7 of 10 right.
    guess = np.array([3, 1, 4, 0, 5, 9, 2, 0, 0, 3], dtype=np.int16)
    path = savez(tmp_path / "p.npz", labels, predicted_class=guess)
    grade = Evaluator("resnet20-cifar10", labels).grade(path)
    assert grade.metrics == {"val_accuracy": 0.7}
    assert (grade.step, grade.epoch, grade.elapsed, grade.examples) == (390, 1.0, 61.25, 10)


def test_top1_and_top5_of_a_fixed_imagenet_file(tmp_path):
    labels = np.array([7, 500, 999, 0])
    top5 = np.array(
        [
            [7, 1, 2, 3, 4],  # top-1 right
            [1, 2, 500, 3, 4],  # top-5 right (third)
            [998, 997, 996, 995, 994],  # both wrong
            [5, 6, 8, 9, 0],  # top-5 right (last)
        ]
    )
    path = savez(tmp_path / "p.npz", labels, predicted_class=top5[:, 0], predicted_top5=top5)
    grade = Evaluator("resnet50-imagenet", labels).grade(path)
    assert grade.metrics == {"val_accuracy": 0.25, "val_top5_accuracy": 0.75}


def test_task2_accuracy_of_a_fixed_file(tmp_path):
    labels = np.array([1, -1, 1, 1, -1])
    guess = np.array([1, 1, 1, -1, -1], dtype=np.int8)  # rows 1 and 3 wrong: 3 of 5
    path = savez(tmp_path / "p.npz", labels, predicted_label=guess)
    assert Evaluator("logreg-epsilon", labels).grade(path).metrics == {"val_accuracy": 0.6}


# The first twelve labels of the generated CIFAR-10 test set for seed 42 (test_sets and
# tests/evaluation/test_generated_labels.py say where they come from).
SEED42_FIRST12 = [2, 2, 8, 9, 3, 0, 0, 3, 9, 3, 2, 9]


def test_a_generated_set_graded_from_its_seed(tmp_path):
    test_set = TestSet("resnet20-cifar10", "synthetic", seed=42, size=12)
    evaluator = Evaluator.of(test_set)
    assert evaluator.labels.tolist() == SEED42_FIRST12
    guess = np.array(SEED42_FIRST12)
    guess[[0, 5, 11]] = [1, 1, 1]  # three wrong: 9 of 12
    path = savez(tmp_path / "p.npz", np.array(SEED42_FIRST12), predicted_class=guess)
    assert evaluator.grade(path).metrics == {"val_accuracy": 0.75}


def test_the_writer_and_reader_keep_every_value(tmp_path):
    labels = np.array([0, 1, 2])
    path = predictions.write(
        tmp_path / "run",
        test_set_digest=digest_of(labels),
        step=12,
        epoch=0.5,
        elapsed=3.5,
        predicted_class=np.array([0, 1, 1]),
    )
    assert path.name == "predictions-step0000000012.npz"
    assert predictions.files_in(tmp_path / "run") == [path]
    read = predictions.read(path)
    assert (read.step, read.epoch, read.elapsed, read.test_set_digest) == (
        12,
        0.5,
        3.5,
        digest_of(labels),
    )
    assert read.arrays["predicted_class"].tolist() == [0, 1, 1]
    grade = Evaluator("resnet20-cifar10", labels).grade(read)
    assert grade.metrics["val_accuracy"] == pytest.approx(2 / 3)


def test_the_digest_is_sha256_of_the_labels_as_little_endian_int64():
    import hashlib

    labels = [1, -1, 1]
    raw = b"".join(v.to_bytes(8, "little", signed=True) for v in labels)
    assert digest_of(np.array(labels, dtype=np.int8)) == hashlib.sha256(raw).hexdigest()


def docs_example() -> str:
    """The code block of docs/checking.rst's "The predictions format"."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "checking.rst").read_text()
    section = text.split("The predictions format\n----------------------\n", 1)[1]
    block = section.split(".. code-block:: python\n\n", 1)[1]
    lines = []
    for line in block.splitlines():
        if line and not line.startswith("   "):
            break
        lines.append(line[3:])
    return "\n".join(lines)


def test_the_example_in_the_docs_writes_a_file_the_evaluator_grades(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(docs_example(), "docs/checking.rst", "exec"), {})
    files = predictions.files_in(tmp_path)
    assert [f.name for f in files] == ["predictions-step0000000390.npz"]
    grade = Evaluator("resnet20-cifar10", np.array([3, 8, 8, 0, 6])).grade(files[0])
    assert grade.metrics == {"val_accuracy": 0.8}
    assert (grade.step, grade.epoch, grade.elapsed) == (390, 1.0, 61.3)
