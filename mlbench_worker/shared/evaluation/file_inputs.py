"""The inputs of the real test sets, read by the evaluator from the official files, for the
ONNX audit (model_audit.py).

The same files and checksums as the labels (file_labels.py): an audit never runs a model on
inputs someone could have edited, nor on the training code's caches.

- CIFAR-10: the ``data`` of the test batch (uint8, 3,072 values a row: the red, green and
  blue planes of a 32 x 32 image), as N x 3 x 32 x 32;
- epsilon: the rows of ``epsilon_normalized.t.bz2`` asked for, parsed from LIBSVM's text
  (``label index:value ...``, indices from 1), float32 N x 2,000. The file is decompressed
  once, from the start, and only the rows asked for are parsed.
"""

from __future__ import annotations

import bz2
from pathlib import Path

import numpy as np

from mlbench_worker.shared.evaluation import file_labels
from mlbench_worker.shared.evaluation.file_labels import LabelsUnavailable

EPSILON_WIDTH = 2000


def cifar10(
    data_dir: str | Path, rows: np.ndarray, md5: dict[str, str] | None = None
) -> np.ndarray:
    """Images `rows` of CIFAR-10's test set: uint8, len(rows) x 3 x 32 x 32, in that order."""
    batch, where = file_labels.cifar10_test_batch(data_dir, md5)
    data = np.asarray(batch.get("data"))
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise LabelsUnavailable(f"{where} holds no uint8 N x 3072 images ({data.shape})")
    rows = np.asarray(rows, dtype=np.int64)
    if rows.size and rows.max() >= data.shape[0]:
        raise LabelsUnavailable(f"{where} has {data.shape[0]} images, not {rows.max() + 1}")
    return data[rows].reshape(-1, 3, 32, 32)


def epsilon(
    data_dir: str | Path,
    rows: np.ndarray,
    sha256: dict[str, str] | None = None,
    width: int = EPSILON_WIDTH,
) -> np.ndarray:
    """Rows `rows` of epsilon's test set: float32, len(rows) x `width`, in that order."""
    path = file_labels.epsilon_test_file(data_dir, sha256)
    rows = np.asarray(rows, dtype=np.int64)
    wanted = {int(r): i for i, r in enumerate(rows)}
    out = np.zeros((rows.size, width), dtype=np.float32)
    last = int(rows.max()) if rows.size else -1
    found = 0  # lines read
    with bz2.open(path, "rb") as fh:
        for number, line in enumerate(fh):
            if number > last:
                break
            found = number + 1
            if number not in wanted:
                continue
            fields = line.split()
            file_labels.epsilon_label(fields[0] if fields else b"", path, number + 1)
            try:
                pairs = np.array([f.split(b":") for f in fields[1:]], dtype=np.float64)
            except ValueError as exc:
                raise LabelsUnavailable(f"{path} line {number + 1}: {exc}") from exc
            if pairs.size:
                index = pairs[:, 0].astype(np.int64) - 1
                if index.min() < 0 or index.max() >= width:
                    raise LabelsUnavailable(
                        f"{path} line {number + 1} has a feature outside 1..{width}"
                    )
                out[wanted[number], index] = pairs[:, 1]
    if found <= last:
        raise LabelsUnavailable(f"{path} ends before row {last + 1}")
    return out
