"""Task 1b's data: the layout and its errors, the crops and labels of the pipeline on real JPEG
files written here, and the synthetic set's files."""

import os
import random

import numpy as np
import pytest
import torch
from PIL import Image

from mlbench_worker.data import DataUnavailable
from mlbench_worker.shared import imagenet_synthetic
from mlbench_worker.tasks.imagenet import IMAGENET_MEAN, IMAGENET_STD, layout, synthetic
from mlbench_worker.tasks.imagenet.layout import Split
from mlbench_worker.tasks.imagenet.pipeline import ImageBatches
from mlbench_worker.tasks.imagenet.transforms import eval_image, random_resized_box, train_image
from mlbench_worker.training.errors import WorkerError

COLOURS = {"n00000001": (255, 0, 0), "n00000002": (0, 255, 0), "n00000003": (0, 0, 255)}


def write_jpeg(path, array, quality=95):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.asarray(array, dtype=np.uint8)).save(path, "JPEG", quality=quality)


def solid(width, height, rgb):
    return np.broadcast_to(np.array(rgb, dtype=np.uint8), (height, width, 3))


@pytest.fixture
def coloured_tree(tmp_path):
    """train/ and val/ with three classes, each image filled with its class's colour and
    sizes that differ, so crops and resizes are exercised."""
    root = tmp_path / "imagenet"
    rng = np.random.default_rng(0)
    for split, per_class in (("train", 5), ("val", 2)):
        for wnid, rgb in COLOURS.items():
            for i in range(per_class):
                w, h = int(rng.integers(120, 400)), int(rng.integers(120, 400))
                write_jpeg(root / split / wnid / f"{wnid}_{i}.JPEG", solid(w, h, rgb))
    return root


def _unnormalise(x):
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    return (x * std + mean) * 255


@pytest.mark.parametrize("train", [True, False])
def test_batches_carry_the_label_of_the_image_they_hold(coloured_tree, train):
    classes = layout.class_folders(coloured_tree / "train")
    split = layout.scan(coloured_tree / ("train" if train else "val"), classes)
    assert classes == sorted(COLOURS) and len(split) == (15 if train else 6)
    data = ImageBatches(split, 4, train=train, crop=64, resize=73, workers=2, channels_last=True)
    order = np.random.default_rng(1).permutation(len(split))
    seen = []
    for x, y in data.iterate(order, torch.Generator().manual_seed(0)):
        assert x.shape[1:] == (3, 64, 64) and x.dtype == torch.float32
        assert x.is_contiguous(memory_format=torch.channels_last)
        pixels = _unnormalise(x).mean(dim=(2, 3))  # N x 3 mean colour
        for colour, label in zip(pixels, y.tolist(), strict=True):
            expected = torch.tensor(COLOURS[classes[label]], dtype=torch.float32)
            assert torch.allclose(colour, expected, atol=4), (colour, label)
            seen.append(label)
    assert sorted(seen) == sorted(split.labels.tolist())  # every image once
    assert data.steps(len(order)) == -(-len(order) // 4)


def test_evaluation_resizes_the_shorter_side_then_takes_the_centre(tmp_path):
    # 512 x 384, left half black, right half white: resized to 341 x 256, the centre crop
    # of 224 starts at column round((341 - 224) / 2) = 58, so the edge moves to 170 - 58.
    img = np.zeros((384, 512, 3), dtype=np.uint8)
    img[:, 256:] = 255
    path = tmp_path / "half.JPEG"
    write_jpeg(path, img)
    out = eval_image(str(path), 224, 256)
    assert out.shape == (224, 224, 3)
    edge = 341 // 2 - 58
    assert out[:, : edge - 3].max() < 30 and out[:, edge + 3 :].min() > 225
    # A portrait image: the width becomes 256 and the height int(256 * 500 / 300) = 426.
    tall = tmp_path / "tall.JPEG"
    write_jpeg(tall, solid(300, 500, (10, 20, 30)))
    assert eval_image(str(tall), 224, 256).shape == (224, 224, 3)


def test_training_crops_are_random_resized_and_mirrored_half_the_time(tmp_path):
    img = np.zeros((300, 400, 3), dtype=np.uint8)
    img[:, 200:] = 255  # dark left half, bright right half
    path = tmp_path / "half.JPEG"
    write_jpeg(path, img)
    mirrored = straight = 0
    for seed in range(200):
        out = train_image(str(path), 96, seed).astype(float)
        assert out.shape == (96, 96, 3)
        left, right = out[:, :10].mean(), out[:, -10:].mean()
        if abs(left - right) > 200:  # the crop holds the edge between the halves
            mirrored += left > right
            straight += left < right
    assert mirrored > 10 and straight > 10
    assert np.array_equal(train_image(str(path), 96, 7), train_image(str(path), 96, 7))


def test_random_resized_box_keeps_area_and_ratio_in_range():
    rng = random.Random(0)
    for _ in range(2000):
        w, h = rng.randint(50, 600), rng.randint(50, 600)
        left, top, bw, bh = random_resized_box(w, h, rng)
        assert 0 <= left and left + bw <= w and 0 <= top and top + bh <= h
        area = bw * bh / (w * h)
        assert (
            area >= 0.08 - 0.02
            and bw / bh <= 4 / 3 + 0.05
            and bw / bh >= 3 / 4 - 0.05
            or (
                bw == w or bh == h  # the fallback: the largest centred box within the ratios
            )
        )
    # An image too narrow for any drawn box gets the centred fallback.
    assert random_resized_box(10, 1000, random.Random(0))[2:] == (10, round(10 / 0.75))


def test_augmentation_does_not_depend_on_the_number_of_loader_processes(coloured_tree):
    classes = layout.class_folders(coloured_tree / "train")
    split = layout.scan(coloured_tree / "train", classes)
    runs = []
    for workers in (0, 2):
        data = ImageBatches(split, 5, train=True, crop=64, workers=workers)
        gen = torch.Generator().manual_seed(3)
        runs.append([x for x, _ in data.iterate(np.arange(len(split)), gen)])
    assert all(torch.equal(a, b) for a, b in zip(*runs, strict=True))


def test_an_unreadable_file_is_named(coloured_tree):
    bad = coloured_tree / "val" / "n00000001" / "broken.JPEG"
    bad.write_bytes(b"not a jpeg")
    classes = layout.class_folders(coloured_tree / "train")
    split = layout.scan(coloured_tree / "val", classes)
    data = ImageBatches(split, 8, train=False, crop=64)
    with pytest.raises(RuntimeError, match="cannot read image .*broken.JPEG"):
        list(data.iterate(np.arange(len(split))))


# --- the layout -------------------------------------------------------------------------
def test_missing_imagenet_says_where_to_put_it(tmp_path):
    with pytest.raises(DataUnavailable) as raised:
        layout.find(tmp_path)
    message = str(raised.value)
    assert f"{tmp_path}/imagenet/train/<wnid>/*.JPEG" in message
    assert f"{tmp_path}/imagenet/val/<wnid>/*.JPEG" in message
    assert "python -m mlbench_worker.tasks.imagenet.sort_val" in message and "--data-dir" in message


def test_a_flat_validation_folder_asks_for_sorting(coloured_tree):
    classes = layout.class_folders(coloured_tree / "train")
    write_jpeg(coloured_tree / "val" / "ILSVRC2012_val_00000001.JPEG", solid(20, 20, (1, 2, 3)))
    with pytest.raises(WorkerError, match="holds 1 image files directly.*sort_val"):
        layout.scan(coloured_tree / "val", classes, required=False)


def test_a_set_without_1000_classes_is_refused(coloured_tree):
    with pytest.raises(
        WorkerError, match="has 3 class folders; ImageNet \\(ILSVRC2012\\) has 1000"
    ):
        layout.find(coloured_tree.parent)


def test_full_layout_is_found_with_labels_in_sorted_folder_order(tmp_path):
    root = tmp_path / "imagenet"
    wnids = [f"n{i:08d}" for i in range(1000)]
    tiny = solid(8, 8, (9, 9, 9))
    for i, wnid in enumerate(wnids):
        write_jpeg(root / "train" / wnid / f"{wnid}_1.JPEG", tiny)
        if i % 100 == 0:
            write_jpeg(root / "val" / wnid / f"val_{i}.JPEG", tiny)
    listing = layout.find(tmp_path)
    assert listing.classes == wnids and len(listing.train) == 1000 and len(listing.val) == 10
    assert listing.val.labels.tolist() == list(range(0, 1000, 100))
    assert listing.train.names[5].decode() == "n00000005/n00000005_1.JPEG"
    # A smoke-test subset spreads over the classes instead of taking the first ones.
    assert listing.train.subset(10).labels.tolist() == list(range(0, 1000, 100))


def test_a_validation_class_the_training_set_lacks_is_an_error(coloured_tree):
    (coloured_tree / "val" / "n09999999").mkdir()
    with pytest.raises(WorkerError, match="training set does not have: n09999999"):
        layout.scan(coloured_tree / "val", sorted(COLOURS), required=False)


def test_an_empty_training_class_is_an_error(coloured_tree):
    for f in (coloured_tree / "train" / "n00000002").iterdir():
        f.unlink()
    with pytest.raises(WorkerError, match="n00000002 holds no image files"):
        layout.scan(coloured_tree / "train", sorted(COLOURS))
    # A validation subset may lack a class.
    (coloured_tree / "val" / "n00000002").rename(coloured_tree / "gone")
    assert len(layout.scan(coloured_tree / "val", sorted(COLOURS), required=False)) == 4


def test_subset_of_a_split():
    split = Split(None, np.array([b"a", b"b", b"c", b"d"]), np.arange(4))
    assert split.subset(None) is split and split.subset(9) is split
    assert split.subset(2).labels.tolist() == [0, 2]


# --- the synthetic set ----------------------------------------------------------------
def test_synthetic_files_are_generated_once_and_grow_as_prefixes(tmp_path):
    synthetic.ensure(tmp_path, 30, 10, say=lambda _m: None)
    root = synthetic.root_of(tmp_path)
    first = root / "train" / synthetic.name_of("train", 3)
    assert first.is_file() and synthetic.available(tmp_path, 30, 10)
    assert not synthetic.available(tmp_path, 31, 10)
    stamp = first.stat().st_mtime_ns
    messages = []
    synthetic.ensure(tmp_path, 30, 10, say=messages.append)
    assert messages == []  # nothing to do
    synthetic.ensure(tmp_path, 40, 10, say=messages.append)
    assert messages and "train 30..39" in messages[0]
    assert first.stat().st_mtime_ns == stamp  # existing files are never rewritten
    files = sorted(p for p in (root / "train").rglob("*.JPEG"))
    assert len(files) == 40 and not list(root.rglob("*.tmp"))
    with Image.open(first) as img:
        assert img.format == "JPEG" and 350 <= img.width <= 500 and 280 <= img.height <= 500
    train = synthetic.split(tmp_path, "train", 40)
    assert train.labels.tolist() == [i % 1000 for i in range(40)]
    assert all((train.folder / n.decode()).is_file() for n in train.names)
    fields = imagenet_synthetic.templates()
    again = synthetic.image_bytes(fields, "val", 5)  # the shared recipe, made again in memory
    assert again == synthetic.image_bytes(fields, "val", 5)
    assert again == (root / "val" / synthetic.name_of("val", 5)).read_bytes()


def test_synthetic_set_reads_through_the_same_pipeline(tmp_path):
    synthetic.ensure(tmp_path, 12, 4, say=lambda _m: None)
    split = synthetic.split(tmp_path, "val", 4)
    x, y = next(ImageBatches(split, 4, train=False).iterate(np.arange(4)))
    assert x.shape == (4, 3, 224, 224) and y.tolist() == [0, 1, 2, 3]


def test_a_damaged_manifest_means_regenerating(tmp_path):
    synthetic.ensure(tmp_path, 5, 2, say=lambda _m: None)
    (synthetic.root_of(tmp_path) / "manifest.json").write_text("{broken")
    assert not synthetic.available(tmp_path, 1, 1)
    synthetic.ensure(tmp_path, 5, 2, say=lambda _m: None)
    assert synthetic.available(tmp_path, 5, 2)
    assert os.listdir(synthetic.root_of(tmp_path) / "val")
