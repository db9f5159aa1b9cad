"""Sort ImageNet's validation set as distributed into one folder per class, once.

    python -m mlbench_worker.tasks.imagenet.sort_val VAL_DIR --labels LABEL_FILE [--meta META]

ILSVRC2012_img_val.tar unpacks into 50,000 files in one folder (ILSVRC2012_val_00000001.JPEG
...), with the classes in a separate file. This moves each file into VAL_DIR/<wnid>/, the
layout the worker reads (layout.py). Two label files are understood, told apart by their
content:

- the development kit's `data/ILSVRC2012_validation_ground_truth.txt`: one class number
  (1..1000) per line, line k for ILSVRC2012_val_<k, 8 digits>.JPEG. The numbers are the
  kit's own ILSVRC2012_ID, not the sorted order of the WordNet ids: the kit's
  `data/meta.mat` maps them (read with scipy, which the worker installs with
  scikit-learn); it is looked for next to the label file unless --meta names it. Both
  files are parsed by mlbench_worker/shared/imagenet_devkit.py, which the evaluator
  reads them with too;
- a list of `FILE WNID` pairs, separated by a comma or blanks, one per line, the file
  with or without its extension; anything after the WNID is ignored and a header line is
  skipped. Kaggle's `LOC_val_solution.csv` is such a list.

Everything is checked before the first file moves: every image in VAL_DIR needs a label,
and every file the label file names must be in VAL_DIR or already sorted. Files are
renamed, not copied. Running it again on a sorted folder changes nothing, and a run that
was interrupted can be run again to finish.

Hand-written: a few lines of text parsing and renames, for which no library is needed.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from mlbench_worker.shared import imagenet_devkit
from mlbench_worker.shared.imagenet_devkit import DevkitError
from mlbench_worker.tasks.imagenet.layout import IMAGE_SUFFIXES

WNID = re.compile(r"^n\d{8}$")


class SortError(Exception):
    """A label file or folder that cannot be sorted; the message names the problem."""


def _stem(name: str) -> str:
    base = os.path.basename(name.strip())
    root, ext = os.path.splitext(base)
    return root if ext.lower() in IMAGE_SUFFIXES else base


def read_meta(meta: Path) -> dict[int, str]:
    """ILSVRC2012_ID -> WNID from the development kit's meta.mat."""
    if not meta.is_file():
        raise SortError(
            f"{meta} not found: the development kit's class numbers need its meta.mat "
            "(ILSVRC2012_devkit_t12/data/meta.mat); pass it with --meta"
        )
    try:
        return imagenet_devkit.read_meta(meta)
    except DevkitError as exc:
        raise SortError(f"{meta} {exc}: is it the development kit's meta.mat?") from exc


def read_labels(labels: Path, meta: Path | None = None) -> dict[str, str]:
    """File name without extension -> WNID, from either kind of label file."""
    try:
        text = labels.read_text()
    except OSError as exc:
        raise SortError(f"cannot read the label file {labels}: {exc.strerror or exc}") from exc
    lines = [ln.strip() for ln in text.splitlines()]
    lines = [ln for ln in lines if ln]
    if not lines:
        raise SortError(f"the label file {labels} is empty")
    if all(ln.isdigit() for ln in lines):  # the development kit's ground truth
        try:
            ground_truth = imagenet_devkit.read_ground_truth(text)
        except DevkitError as exc:
            raise SortError(f"{labels} {exc}") from exc
        ids = read_meta(meta or labels.parent / "meta.mat")
        try:
            return imagenet_devkit.val_wnids(ground_truth, ids)
        except DevkitError as exc:
            raise SortError(f"{labels} {exc}") from exc
    out = {}
    for k, ln in enumerate(lines, start=1):
        parts = re.split(r"[,\s]+", ln)
        if len(parts) < 2 or not WNID.match(parts[1]):
            if k == 1:  # a header such as "ImageId,PredictionString"
                continue
            raise SortError(
                f"{labels} line {k}: expected 'FILE WNID' (e.g. ILSVRC2012_val_00000001.JPEG "
                f"n01751748) or, for the development kit's file, one class number per line; "
                f"got {ln[:80]!r}"
            )
        out[_stem(parts[0])] = parts[1]
    return out


def plan(val_dir: Path, labels: dict[str, str]) -> tuple[list[tuple[Path, Path]], int]:
    """(moves to make, files already sorted); SortError before anything moves."""
    if not val_dir.is_dir():
        raise SortError(f"{val_dir} is not a folder")
    flat = sorted(
        p for p in val_dir.iterdir() if p.is_file() and p.name.lower().endswith(IMAGE_SUFFIXES)
    )
    unlabelled = [p.name for p in flat if _stem(p.name) not in labels]
    if unlabelled:
        raise SortError(
            f"{len(unlabelled)} images in {val_dir} have no label in the label file, e.g. "
            f"{', '.join(unlabelled[:3])}: is it the label file of this validation set?"
        )
    flat_stems = {_stem(p.name) for p in flat}
    sorted_stems = {
        _stem(p.name)
        for wnid in set(labels.values())
        if (val_dir / wnid).is_dir()
        for p in (val_dir / wnid).iterdir()
    }
    absent = [s for s in labels if s not in flat_stems and s not in sorted_stems]
    if absent:
        raise SortError(
            f"{len(absent)} files named in the label file are neither in {val_dir} nor "
            f"sorted into its class folders, e.g. {', '.join(sorted(absent)[:3])}: is the "
            "validation set complete?"
        )
    moves = [(p, val_dir / labels[_stem(p.name)] / p.name) for p in flat]
    return moves, len(labels) - len(moves)


def sort_val(val_dir: Path, labels: Path, meta: Path | None = None) -> tuple[int, int, int]:
    """Sort `val_dir`; returns (files moved, files that were already sorted, classes)."""
    wnids = read_labels(labels, meta)
    moves, done = plan(val_dir, wnids)
    for src, dst in moves:
        dst.parent.mkdir(exist_ok=True)
        os.replace(src, dst)
    return len(moves), done, len(set(wnids.values()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mlbench_worker.tasks.imagenet.sort_val",
        description="Sort ImageNet's validation images into VAL_DIR/<wnid>/ folders, once.",
    )
    parser.add_argument("val_dir", type=Path, help="the folder ILSVRC2012_img_val.tar unpacked")
    parser.add_argument(
        "--labels",
        type=Path,
        required=True,
        help="ILSVRC2012_validation_ground_truth.txt (development kit) or a FILE,WNID list "
        "such as LOC_val_solution.csv",
    )
    parser.add_argument(
        "--meta",
        type=Path,
        help="the development kit's meta.mat (default: next to the label file)",
    )
    args = parser.parse_args(argv)
    try:
        moved, done, classes = sort_val(args.val_dir, args.labels, args.meta)
    except SortError as exc:
        print(f"sort_val: error: {exc}", file=sys.stderr)
        return 2
    if moved:
        print(f"sorted {moved} images into {classes} class folders under {args.val_dir}")
    else:
        print(f"nothing to do: {args.val_dir} is already sorted ({done} images)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
