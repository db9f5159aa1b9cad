"""Real ImageNet's labels, read by the evaluator from the development kit's archive.

There is no real ImageNet here: each test builds a small kit in the real format (a tar.gz
holding ``ILSVRC2012_devkit_t12/data/meta.mat`` with a ``synsets`` struct array as the
real one has, and the validation ground truth) and passes its MD5, so what is tested is
the format and the order rule, not the real archive's contents.
"""

from __future__ import annotations

import functools
import hashlib
import io
import subprocess
import sys
import tarfile

import numpy as np
import pytest
from scipy.io import savemat

from mlbench_worker.shared import data_files, imagenet_devkit
from mlbench_worker.shared.evaluation import file_labels, test_sets
from mlbench_worker.shared.evaluation.file_labels import LabelsUnavailable
from mlbench_worker.tasks.imagenet import layout, sort_val
from tests.worker.helpers import worker_env

TASK = "resnet50-imagenet"
# The kit numbers its classes in its own order. Here class number i (1..1000) is the WNID
# n00000<i * 7919 mod 1000, 3 digits>: a permutation, so class i's label (its WNID's place
# among the 1000 sorted) is i * 7919 mod 1000, e.g. 1 -> 919, 2 -> 838, 3 -> 757, 1000 -> 0.
GROUND_TRUTH = [2, 1, 1000, 2, 3, 1]  # ILSVRC2012_val_00000001 ... _00000006


def wnid(number: int) -> str:
    return f"n{number * 7919 % 1000:08d}"


def _mat(**variables) -> bytes:
    buf = io.BytesIO()
    savemat(buf, variables)
    return buf.getvalue()


@functools.cache
def meta_mat(low: tuple[int, ...] = tuple(range(1, 1001))) -> bytes:
    """meta.mat as the kit holds it: the classes (ILSVRC2012_ID 1..1000, no children) and,
    above them, WordNet's inner synsets (IDs from 1001) that are no class."""
    fields = ["ILSVRC2012_ID", "WNID", "words", "gloss", "num_children", "children",
              "wordnet_height", "num_train_images"]  # fmt: skip
    rows = [(n, wnid(n), f"class {n}", "a class", 0, np.zeros(0), 0, 1300) for n in low]
    rows += [(1001, "n99999998", "inner", "not a class", 2, np.array([1, 2]), 1, 0)]
    rows += [(1002, "n00000000", "root", "not a class", 1, np.array([1001]), 2, 0)]
    return _mat(synsets=np.array(rows, dtype=[(f, "O") for f in fields]))


def make_devkit(data_dir, ground_truth=GROUND_TRUTH, meta=None, skip=()) -> str:
    """<data_dir>/imagenet/ILSVRC2012_devkit_t12.tar.gz; returns its MD5. `meta`: the bytes
    of meta.mat (default: write_meta's); `skip`: members left out."""
    meta = meta_mat() if meta is None else meta
    text = "".join(f"{n}\n" for n in ground_truth).encode()
    members = {imagenet_devkit.META: meta, imagenet_devkit.GROUND_TRUTH: text}
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, raw in members.items():
            if name in skip:
                continue
            info = tarfile.TarInfo(name)
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    root = data_dir / "imagenet"
    root.mkdir(parents=True, exist_ok=True)
    (root / data_files.IMAGENET_DEVKIT_ARCHIVE).write_bytes(out.getvalue())
    return hashlib.md5(out.getvalue()).hexdigest()


def test_labels_are_in_the_sorted_listings_order_counted_by_hand(tmp_path):
    md5 = make_devkit(tmp_path)
    # Files 1..6 are classes 2, 1, 1000, 2, 3, 1: labels 838, 919, 0, 838, 757, 919. The
    # listing goes by label, then by file name: files 3, 5, 1, 4, 2, 6.
    labels = file_labels.imagenet(tmp_path, md5=md5)
    assert labels.dtype == np.int64
    assert labels.tolist() == [0, 757, 838, 838, 919, 919]
    truth = np.array(GROUND_TRUTH)
    meta = {n: wnid(n) for n in range(1, 1001)} | {1001: "n99999998", 1002: "n00000000"}
    numbers, ordered = imagenet_devkit.val_order(truth, meta)
    assert numbers.tolist() == [3, 5, 1, 4, 2, 6] and ordered.tolist() == labels.tolist()
    # The inner synsets (1001, 1002) are no class: "n00000000" would otherwise come first.
    assert imagenet_devkit.class_wnids(meta)[:2] == ["n00000000", "n00000001"]
    assert wnid(1000) == "n00000000"


def test_the_worker_sorts_lists_and_subsets_the_same_rows(tmp_path):
    """sort_val sorts flat files with the same kit; the worker's listing (layout.scan) and
    its --test-images subset carry the evaluator's labels, and the sorted folders pass the
    evaluator's check of where each image lies."""
    md5 = make_devkit(tmp_path)
    with tarfile.open(tmp_path / "imagenet" / data_files.IMAGENET_DEVKIT_ARCHIVE) as tar:
        tar.extractall(tmp_path / "kit", filter="data")
    val = tmp_path / "imagenet" / "val"
    val.mkdir()
    for k in range(1, len(GROUND_TRUTH) + 1):
        (val / f"ILSVRC2012_val_{k:08d}.JPEG").write_bytes(b"jpeg")
    data = tmp_path / "kit" / "ILSVRC2012_devkit_t12" / "data"
    assert (
        sort_val.main([str(val), "--labels", str(data / "ILSVRC2012_validation_ground_truth.txt")])
        == 0
    )
    classes = sorted(wnid(n) for n in range(1, 1001))  # the training folders, sorted
    listing = layout.scan(val, classes, required=False)
    assert [n.decode().split("/")[1][15:23] for n in listing.names] == [
        "00000003", "00000005", "00000001", "00000004", "00000002", "00000006"
    ]  # fmt: skip
    ours = file_labels.imagenet(tmp_path, md5=md5)  # also checks the sorted folders
    np.testing.assert_array_equal(ours, listing.labels)
    for size in (1, 2, 4, 5, 6):
        np.testing.assert_array_equal(
            file_labels.imagenet_subset(ours, size), listing.subset(size).labels
        )


def test_a_run_on_fewer_images_gets_the_spread_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(data_files, "IMAGENET_DEVKIT_MD5", make_devkit(tmp_path))

    def labels(size):
        return test_sets.labels(test_sets.TestSet(TASK, "imagenet", 1, size, str(tmp_path)))

    assert labels(6).tolist() == [0, 757, 838, 838, 919, 919]
    assert labels(4).tolist() == [0, 757, 838, 919]  # rows 0, 1, 3, 4 (k * 6 // 4)
    assert labels(2).tolist() == [0, 838]  # rows 0 and 3, not the first two
    with pytest.raises(ValueError, match="asks for 7 examples; the files hold 6"):
        labels(7)


def test_a_missing_archive_says_where_to_put_it(tmp_path):
    (tmp_path / "imagenet" / "val").mkdir(parents=True)  # sorted images, but no kit
    where = tmp_path / "imagenet" / "ILSVRC2012_devkit_t12.tar.gz"
    with pytest.raises(LabelsUnavailable, match=f"kit at {where}, which is not there: .*image-net"):
        test_sets.labels(test_sets.TestSet(TASK, "imagenet", 1, 5, str(tmp_path)))


def test_the_real_checksum_is_checked_first(tmp_path):
    make_devkit(tmp_path)
    with pytest.raises(LabelsUnavailable, match="wrong checksum .*expected fa75699e9041"):
        file_labels.imagenet(tmp_path)  # a kit built here is not the published archive
    with pytest.raises(LabelsUnavailable, match="wrong checksum .*expected 0000"):
        file_labels.imagenet(tmp_path, md5="0" * 32)


@pytest.mark.parametrize(
    ("ground_truth", "match"),
    [
        ([2, 1001, 1], "ground_truth.txt line 2: '1001' is not a class number 1..1000"),
        ([0], "line 1: '0' is not a class number 1..1000"),
        (["2", "", "1"], "line 2 is empty"),
        (["n01440764"], "line 1: 'n01440764' is not a class number"),
        ([], "ground_truth.txt is empty"),
    ],
)
def test_a_damaged_ground_truth_is_refused(tmp_path, ground_truth, match):
    md5 = make_devkit(tmp_path, ground_truth=ground_truth)
    with pytest.raises(LabelsUnavailable, match=match):
        file_labels.imagenet(tmp_path, md5=md5)


@pytest.mark.parametrize(
    ("meta", "match"),
    [
        (_mat(classes=np.arange(3)), r"meta.mat has no synsets \(it holds \['classes'\]\)"),
        (b"not a MATLAB file", "meta.mat is not a MATLAB file scipy can read"),
        (
            _mat(synsets=np.array([(1, "x")], dtype=[("ID", "O"), ("name", "O")])),
            "has synsets without ILSVRC2012_ID and WNID",
        ),
    ],
)
def test_a_damaged_meta_mat_is_refused(tmp_path, meta, match):
    md5 = make_devkit(tmp_path, meta=meta)
    with pytest.raises(LabelsUnavailable, match=match):
        file_labels.imagenet(tmp_path, md5=md5)


def test_a_kit_without_every_class_or_member_is_refused(tmp_path):
    md5 = make_devkit(tmp_path, meta=meta_mat(low=tuple(n for n in range(1, 1001) if n != 17)))
    with pytest.raises(LabelsUnavailable, match="has no synset with ILSVRC2012_ID 17 "):
        file_labels.imagenet(tmp_path, md5=md5)
    md5 = make_devkit(tmp_path, skip=(imagenet_devkit.META,))
    with pytest.raises(LabelsUnavailable, match="has no readable ILSVRC2012_devkit_t12/data/meta"):
        file_labels.imagenet(tmp_path, md5=md5)
    (tmp_path / "imagenet" / data_files.IMAGENET_DEVKIT_ARCHIVE).write_bytes(b"not gzip")
    md5 = hashlib.md5(b"not gzip").hexdigest()
    with pytest.raises(LabelsUnavailable, match="has no readable"):
        file_labels.imagenet(tmp_path, md5=md5)


def test_sorted_folders_that_disagree_with_the_kit_are_refused(tmp_path):
    md5 = make_devkit(tmp_path)
    val = tmp_path / "imagenet" / "val"
    for k, number in enumerate(GROUND_TRUTH, start=1):
        (val / wnid(number)).mkdir(parents=True, exist_ok=True)
        (val / wnid(number) / f"ILSVRC2012_val_{k:08d}.JPEG").write_bytes(b"jpeg")
    assert file_labels.imagenet(tmp_path, md5=md5).size == 6
    # File 5 (class 3) moved into class 1's folder: the run would be graded on other labels.
    moved = val / wnid(1) / "ILSVRC2012_val_00000005.JPEG"
    (val / wnid(3) / "ILSVRC2012_val_00000005.JPEG").rename(moved)
    with pytest.raises(LabelsUnavailable, match=f"{moved} is not where .* belongs in {wnid(3)}/"):
        file_labels.imagenet(tmp_path, md5=md5)
    moved.unlink()
    with pytest.raises(LabelsUnavailable, match="holds 5 of the 6 validation images"):
        file_labels.imagenet(tmp_path, md5=md5)
    (val / wnid(3) / "ILSVRC2012_val_00000099.JPEG").write_bytes(b"jpeg")
    with pytest.raises(LabelsUnavailable, match="00000099.JPEG is not where .* lists no such"):
        file_labels.imagenet(tmp_path, md5=md5)


def test_grading_other_sets_never_loads_scipy():
    """scipy is the evaluator's only for meta.mat: importing the evaluator and grading the
    other sets leaves it unloaded (the master imports the evaluator at start)."""
    code = (
        "import sys\n"
        "from mlbench_worker.shared.evaluation import evaluator, file_labels, test_sets\n"
        "test_sets.labels(test_sets.TestSet('resnet50-imagenet', 'synthetic', 1, 5))\n"
        "test_sets.labels(test_sets.TestSet('resnet20-cifar10', 'synthetic', 1, 5))\n"
        "assert 'scipy' not in sys.modules, 'scipy was loaded'\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=worker_env(), timeout=60
    )
    assert proc.returncode == 0, proc.stderr
