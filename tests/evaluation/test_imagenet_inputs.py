"""Task 1b's test inputs as the evaluator makes them for the audit: its own Pillow transform
gives the run pipeline's evaluation crops pixel for pixel; the generated set's images are
made again in memory from the one recipe the run writes its files with; the real set's are
read from the sorted validation folders in the order, and the spread, the run reads them.

The tests import both sides (the evaluator itself imports nothing of the worker's)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from mlbench_worker.shared import imagenet_synthetic
from mlbench_worker.shared.evaluation import imagenet_inputs, test_sets
from mlbench_worker.shared.evaluation.file_labels import LabelsUnavailable
from mlbench_worker.shared.evaluation.test_sets import TestSet
from mlbench_worker.shared.imagenet_rules import eval_resize
from mlbench_worker.tasks.imagenet import layout, synthetic
from mlbench_worker.tasks.imagenet.pipeline import BatchReader
from mlbench_worker.tasks.imagenet.transforms import eval_image

CROPS = [224, 64, 97]  # the benchmark's, the smoke tests', and one whose offsets round at .5


def pipeline_crops(split, rows, crop):
    """What the run's evaluation reads for `rows` of `split`: its own reader's uint8 images,
    N x H x W x 3, as channels-first arrays."""
    reader = BatchReader(split, train=False, crop=crop, resize=eval_resize(crop))
    x, _ = reader[(np.asarray(rows), np.zeros(len(rows), dtype=np.int64))]
    return x.numpy().transpose(0, 3, 1, 2)


def images(folder):
    """A few JPEG (and one PNG) files unlike each other: landscape, portrait, square, odd
    sizes, greyscale, CMYK, a palette PNG."""
    rng = np.random.default_rng(3)
    made = []
    for i, (w, h, mode) in enumerate(
        [(500, 375, "RGB"), (333, 500, "RGB"), (257, 257, "RGB"), (401, 299, "L"),
         (300, 451, "CMYK"), (640, 427, "P")]
    ):  # fmt: skip
        img = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).convert(mode)
        path = folder / (f"{i}.png" if mode == "P" else f"{i}.JPEG")
        img.save(path)
        made.append(path)
    return made


@pytest.mark.parametrize("crop", CROPS)
def test_the_evaluators_transform_is_the_pipelines_pixel_for_pixel(tmp_path, crop):
    resize = eval_resize(crop)
    for path in images(tmp_path):
        theirs = eval_image(str(path).encode(), crop, resize).transpose(2, 0, 1)
        ours = imagenet_inputs.pixels(path.read_bytes(), crop, resize)
        assert ours.dtype == np.uint8 and ours.shape == (3, crop, crop)
        np.testing.assert_array_equal(ours, theirs, err_msg=f"{path.name} at {crop}")
        np.testing.assert_array_equal(imagenet_inputs.pixels(path, crop, resize), theirs)


def test_the_resize_rule_is_the_tasks():
    assert [eval_resize(c) for c in (224, 64, 97, 512)] == [256, 73, 111, 585]


@pytest.mark.parametrize("crop", [64, 224])
def test_generated_images_are_made_again_from_the_runs_recipe(tmp_path, crop):
    size = 12
    synthetic.ensure(tmp_path, 1, size, say=lambda _m: None)  # the run's generator, on disk
    split = synthetic.split(tmp_path, "val", size)
    fields = imagenet_synthetic.templates()
    for i in (0, 5, 11):  # the bytes the evaluator makes are the file the run wrote
        written = (split.folder / split.names[i].decode()).read_bytes()
        assert imagenet_synthetic.image_bytes(fields, "val", i) == written
    rows = np.array([11, 0, 7, 3])  # any order
    ours = test_sets.inputs(TestSet("resnet50-imagenet", "synthetic", 42, size), rows, crop)
    assert ours.dtype == np.uint8 and ours.shape == (4, 3, crop, crop)
    np.testing.assert_array_equal(ours, pipeline_crops(split, rows, crop))
    default = test_sets.inputs(TestSet("resnet50-imagenet", "synthetic", 1, size), rows[:1])
    assert default.shape == (1, 3, 224, 224)  # no crop named: the benchmark's


@pytest.fixture
def real_layout(tmp_path):
    """A miniature ImageNet: 5 training classes; 4 validation folders (one class has none)
    with 1 to 4 files each, written out of order, and a hidden folder and text files the
    listing must skip."""
    root = tmp_path / "imagenet"
    rng = np.random.default_rng(0)
    wnids = [f"n0000000{k}" for k in range(5)]
    for wnid in wnids:
        (root / "train" / wnid).mkdir(parents=True)
        Image.new("RGB", (80, 70)).save(root / "train" / wnid / "t.JPEG")
    for k, wnid in enumerate(reversed(wnids[:4])):  # folders made in reverse order
        folder = root / "val" / wnid
        folder.mkdir(parents=True)
        for j in reversed(range(1 + k)):
            w, h = int(rng.integers(90, 200)), int(rng.integers(90, 200))
            pixels = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / f"ILSVRC2012_val_{k}{j:03d}.JPEG")
        (folder / "notes.txt").write_text("not an image")
    (root / "val" / ".cache").mkdir()
    return tmp_path


@pytest.mark.parametrize("size", [10, 7, 3])
def test_real_images_are_read_in_the_runs_sorted_and_spread_order(real_layout, size):
    listing = layout.find(real_layout, num_classes=5)
    run_split = listing.val.subset(size)  # what the run evaluates on
    assert len(listing.val) == 10 and len(run_split) == size
    files = imagenet_inputs.real_files(real_layout, size)
    assert [f"{p.parent.name}/{p.name}".encode() for p in files] == list(run_split.names)
    rows = np.arange(size)[::-1]
    test_set = TestSet("resnet50-imagenet", "imagenet", 0, size, str(real_layout))
    ours = test_sets.inputs(test_set, rows, crop=64)
    np.testing.assert_array_equal(ours, pipeline_crops(run_split, rows, 64))


def test_real_images_missing_or_too_few_are_unavailable(real_layout, tmp_path):
    with pytest.raises(LabelsUnavailable, match="holds 10 images in class folders, not 11"):
        imagenet_inputs.real_files(real_layout, 11)
    with pytest.raises(LabelsUnavailable, match="cannot list ImageNet's validation images"):
        imagenet_inputs.real_files(tmp_path / "nowhere", 1)
    broken = sorted((real_layout / "imagenet" / "val").glob("n*/*.JPEG"))[0]
    broken.write_bytes(b"not a JPEG")
    with pytest.raises(LabelsUnavailable, match="cannot read image .*ILSVRC2012_val_"):
        imagenet_inputs.real(real_layout, 10, np.array([0]), 64)


@pytest.mark.parametrize("crop", [63, 513])
def test_a_crop_no_run_takes_is_refused(crop):
    with pytest.raises(ValueError, match=f"a crop of {crop} pixels .*64 to 512"):
        test_sets.inputs(TestSet("resnet50-imagenet", "synthetic", 1, 5), np.arange(2), crop)
