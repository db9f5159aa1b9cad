"""Sorting the validation set as distributed (flat, with a label file) into class folders."""

import subprocess
import sys

import numpy as np
import pytest
from scipy.io import savemat

from mlbench_worker.tasks.imagenet.sort_val import main

from .helpers import worker_env

# The development kit numbers classes in its own order, not by sorted WordNet id.
KIT = {1: "n02119789", 2: "n01440764", 3: "n09999999"}


def _flat_val(folder, count):
    folder.mkdir(parents=True)
    for k in range(1, count + 1):
        (folder / f"ILSVRC2012_val_{k:08d}.JPEG").write_bytes(f"image {k}".encode())


def _meta(path):
    synsets = np.array(
        [(i, w, "words") for i, w in KIT.items()],
        dtype=[("ILSVRC2012_ID", "O"), ("WNID", "O"), ("words", "O")],
    )
    savemat(str(path), {"synsets": synsets})


def test_devkit_ground_truth_with_meta_mat(tmp_path, capsys):
    val = tmp_path / "val"
    _flat_val(val, 4)
    kit = tmp_path / "devkit" / "data"
    kit.mkdir(parents=True)
    (kit / "ILSVRC2012_validation_ground_truth.txt").write_text("2\n1\n2\n3\n")
    _meta(kit / "meta.mat")
    assert main([str(val), "--labels", str(kit / "ILSVRC2012_validation_ground_truth.txt")]) == 0
    assert "sorted 4 images into 3 class folders" in capsys.readouterr().out
    assert sorted(p.name for p in (val / "n01440764").iterdir()) == [
        "ILSVRC2012_val_00000001.JPEG",
        "ILSVRC2012_val_00000003.JPEG",
    ]
    assert (val / "n02119789" / "ILSVRC2012_val_00000002.JPEG").read_bytes() == b"image 2"
    assert (val / "n09999999" / "ILSVRC2012_val_00000004.JPEG").is_file()
    assert not [p for p in val.iterdir() if p.is_file()]
    # Again: nothing to do.
    assert main([str(val), "--labels", str(kit / "ILSVRC2012_validation_ground_truth.txt")]) == 0
    assert "already sorted (4 images)" in capsys.readouterr().out


def test_file_wnid_list_with_header_like_kaggles(tmp_path):
    val = tmp_path / "val"
    _flat_val(val, 3)
    labels = tmp_path / "LOC_val_solution.csv"
    labels.write_text(
        "ImageId,PredictionString\n"
        "ILSVRC2012_val_00000002,n01440764 1 2 3 4 n01440764 5 6 7 8\n"
        "ILSVRC2012_val_00000001,n02119789 1 2 3 4\n"
        "ILSVRC2012_val_00000003.JPEG n02119789\n"
    )
    assert main([str(val), "--labels", str(labels)]) == 0
    assert (val / "n01440764" / "ILSVRC2012_val_00000002.JPEG").is_file()
    assert len(list((val / "n02119789").iterdir())) == 2


def test_an_interrupted_sort_can_be_finished(tmp_path):
    val = tmp_path / "val"
    _flat_val(val, 3)
    labels = tmp_path / "labels.txt"
    labels.write_text("\n".join(f"ILSVRC2012_val_{k:08d} n0000000{k}" for k in (1, 2, 3)))
    (val / "n00000001").mkdir()
    (val / "ILSVRC2012_val_00000001.JPEG").rename(val / "n00000001/ILSVRC2012_val_00000001.JPEG")
    assert main([str(val), "--labels", str(labels)]) == 0
    assert all(
        (val / f"n0000000{k}" / f"ILSVRC2012_val_0000000{k}.JPEG").is_file() for k in (1, 2, 3)
    )


@pytest.mark.parametrize(
    "labels, words",
    [
        ("ILSVRC2012_val_00000001 n00000001\n", "2 images in"),  # two files lack a label
        ("1\n2\n3\n", "meta.mat not found"),
        ("a,b\nILSVRC2012_val_00000001 cat\n", "line 2: expected 'FILE WNID'"),
        ("", "is empty"),
        (
            "\n".join(f"ILSVRC2012_val_{k:08d} n00000001" for k in range(1, 6)),
            "2 files named in the label file are neither in",
        ),
    ],
)
def test_bad_label_files_stop_before_anything_moves(tmp_path, capsys, labels, words):
    val = tmp_path / "val"
    _flat_val(val, 3)
    path = tmp_path / "labels.txt"
    path.write_text(labels)
    assert main([str(val), "--labels", str(path)]) == 2
    assert words in capsys.readouterr().err
    assert len([p for p in val.iterdir() if p.is_file()]) == 3  # nothing moved


def test_a_class_number_missing_from_meta_mat(tmp_path, capsys):
    val = tmp_path / "val"
    _flat_val(val, 1)
    (tmp_path / "gt.txt").write_text("7\n")
    _meta(tmp_path / "meta.mat")
    assert main([str(val), "--labels", str(tmp_path / "gt.txt")]) == 2
    assert "line 1: class number 7 is not in the meta.mat" in capsys.readouterr().err


def test_the_documented_command_runs(tmp_path):
    val = tmp_path / "val"
    _flat_val(val, 1)
    (tmp_path / "l.txt").write_text("ILSVRC2012_val_00000001.JPEG n00000042\n")
    proc = subprocess.run(
        [sys.executable, "-m", "mlbench_worker.tasks.imagenet.sort_val", str(val), "--labels",
         str(tmp_path / "l.txt")],
        capture_output=True, text=True, env=worker_env(), timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (val / "n00000042" / "ILSVRC2012_val_00000001.JPEG").is_file()
    missing = subprocess.run(
        [sys.executable, "-m", "mlbench_worker.tasks.imagenet.sort_val", str(tmp_path / "nope"),
         "--labels", str(tmp_path / "l.txt")],
        capture_output=True, text=True, env=worker_env(), timeout=60,
    )  # fmt: skip
    assert missing.returncode == 2 and "is not a folder" in missing.stderr
