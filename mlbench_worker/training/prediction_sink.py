"""Where an evaluation's predictions go: gathered to rank 0 in the test set's order, written
in the predictions format, and handed to the reporter, which posts them to the master.

Every implementation (the reference loop and torch-ddp through training/trainer.py, task 2's
and task 1b's trainers on it, and implementations/tensorflow/train.py) evaluates each rank
on a part of the test set. After each evaluation every rank hands its part here (the
positions of its examples in the set, the labels it compared with, its predictions); rank 0
puts the parts back into the set's own order, checks that they cover every example once,
and writes one file with `predictions.write` (shared/evaluation/predictions.py: the format
the evaluator grades). The digest in the file is `digest_of` the labels the ranks evaluated
against, in set order, so a shard put back in the wrong place makes the digest differ and
the evaluator refuses the file instead of grading shifted predictions.

The file goes into ``predictions/`` beside ``--metrics-file`` when the run has one; with a
master and no metrics file it is written to a temporary folder, posted and removed. A run
with neither gathers nothing. Rank 0 reports, so its options decide, broadcast once when
the sink is made: every rank then takes part in the same gathers.

Why rank 0 writes the file and does not post it itself: the reporter's thread already posts
metrics with retries and back-off, and one evaluation's file is a few hundred kilobytes, so
posting it there keeps the training loop from waiting on the network (metric_sink.py).

At the end of training the run's final model, exported to ONNX by the implementation
(training/torch_export.py, implementations/tensorflow/keras_export.py), goes the same way:
``model.onnx`` beside ``predictions/`` (written beside it first and renamed, so a reader or
a crash never meets half a model), or a temporary file, handed to the reporter after the
last predictions with that evaluation's step and precision (`submit_model`).

Torch-free (numpy and the standard library): the TensorFlow process uses it too.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from mlbench_worker.shared.evaluation import predictions
from mlbench_worker.training.metric_sink import Reporter

MODEL_FILE = "model.onnx"


class Collectives(Protocol):
    """What the sink needs of a communicator (training/comm.py's, or TensorFlow's Control)."""

    rank: int

    def bcast_object(self, obj: Any, root: int = 0) -> Any: ...
    def gather_object(self, obj: Any, root: int = 0) -> list | None: ...


@dataclass
class Shard:
    """One rank's part of one evaluation: `indices` are the positions of its examples in the
    test set; `labels` and every array of `arrays` (some of predictions.PREDICTIONS) follow
    them row for row."""

    indices: np.ndarray
    labels: np.ndarray
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


def in_set_order(parts: list[Shard]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The labels and predictions of all `parts`, in the test set's order; RuntimeError when
    the parts do not cover positions 0..N-1 exactly once (a bug in how a trainer shards its
    test set: grading it would grade the wrong examples)."""
    filled = [p for p in parts if len(p.indices)]
    if not filled:
        raise RuntimeError("no rank evaluated any test example: nothing to put in order")
    names = sorted({name for p in filled for name in p.arrays})
    for p in filled:
        lengths = {len(p.labels), *(len(p.arrays.get(n, ())) for n in names)}
        if lengths != {len(p.indices)}:
            raise RuntimeError(
                f"a rank's shard has {len(p.indices)} positions but rows of other lengths "
                f"({sorted(lengths)}) or lacks one of {names}"
            )
    where = np.concatenate([np.asarray(p.indices, dtype=np.int64) for p in filled])
    order = np.argsort(where, kind="stable")
    if not np.array_equal(where[order], np.arange(where.size)):
        seen = np.bincount(where[where >= 0], minlength=where.size)
        raise RuntimeError(
            f"the ranks' test shards do not cover the {where.size} positions once each "
            f"(first position missing or repeated: {int(np.flatnonzero(seen != 1)[0])})"
        )
    labels = np.concatenate([p.labels for p in filled])[order]
    arrays = {n: np.concatenate([p.arrays[n] for p in filled])[order] for n in names}
    return labels, arrays


def publish(
    folder: Path | None,
    reporter: Reporter,
    dataset: str,
    features: int | None,
    test_set_digest: str,
    arrays: dict[str, Any],
    meta: dict,
) -> Path | None:
    """Write one evaluation's file (into `folder`, or a temporary one removed afterwards)
    and hand it to `reporter`; the file kept, or None. `test_set_digest`: the labels'
    (`predictions.digest_of`) or, for a text task, the references' (`digest_of_text`);
    `arrays`: `predictions.write`'s fields. A file that cannot be written is said on stderr
    and skipped: the run goes on (its own metrics still stand)."""
    where = folder if folder is not None else Path(tempfile.mkdtemp(prefix="mlbench-pred-"))
    try:
        path = predictions.write(
            where,
            test_set_digest=test_set_digest,
            step=meta["step"],
            epoch=meta["epoch"],
            elapsed=meta["elapsed"],
            **arrays,
        )
        reporter.predictions(path, dataset, features)
    except OSError as exc:
        print(
            f"mlbench-worker: warning: the predictions of step {meta['step']} could not be "
            f"written into {where}: {exc}",
            file=sys.stderr,
            flush=True,
        )
        return None
    finally:
        if folder is None:
            shutil.rmtree(where, ignore_errors=True)
    return path if folder is not None else None


class PredictionSink:
    """One run's destination of its predictions, the same object on every rank."""

    def __init__(
        self,
        comm: Collectives,
        reporter: Reporter,
        *,
        folder: Path | None,
        dataset: str,
        features: int | None,
        enabled: bool,
    ) -> None:
        self.comm = comm
        self.reporter = reporter
        self.folder = folder
        self.dataset = dataset
        self.features = features
        self.enabled = enabled
        self.written: list[Path] = []  # rank 0's files, in the order written
        self.last_step: int | None = None  # rank 0: the step of the last evaluation submitted

    def submit(self, shard: Shard, record: dict) -> None:
        """Every rank's part of the evaluation `record` describes (the progress history's
        entry record_evaluation made: its step, epoch and elapsed are the file's, those the
        run's own accuracy was reported with); rank 0 writes and posts the whole."""
        if not self.enabled:
            return
        meta = {key: record[key] for key in ("step", "epoch", "elapsed")}
        parts = self.comm.gather_object(shard)
        if self.comm.rank != 0:
            return
        assert parts is not None
        labels, arrays = in_set_order(parts)
        self.last_step = int(meta["step"])
        digest = predictions.digest_of(labels)
        path = publish(
            self.folder, self.reporter, self.dataset, self.features, digest, arrays, meta
        )
        if path is not None:
            self.written.append(path)

    def note_evaluation(self, record: dict) -> None:
        """An evaluation that writes no predictions (task 3's: the evaluator grades its
        model, perplexity_audit.py): the final model is posted with its step all the same."""
        if self.enabled and self.comm.rank == 0:
            self.last_step = int(record["step"])

    def submit_model(self, write: Callable[[Path], None], precision: str = "fp32") -> Path | None:
        """Rank 0, once, after the last evaluation (evaluated in `precision`): `write(path)`
        exports the final model into `path`, which then becomes model.onnx beside the
        predictions (or in a temporary folder); it is handed to the reporter with the last
        evaluation's step. A model that cannot be exported or written is said in the run's
        log and skipped: the run stays graded by its predictions (its audit: "no model").
        The file kept, or None."""
        if not self.enabled or self.comm.rank != 0 or self.last_step is None:
            return None
        kept = self.folder is not None
        where = self.folder.parent if kept else Path(tempfile.mkdtemp(prefix="mlbench-model-"))
        path = where / MODEL_FILE
        partial = where / f".{MODEL_FILE}.{uuid.uuid4().hex}.tmp"
        try:
            where.mkdir(parents=True, exist_ok=True)
            write(partial)
            os.replace(partial, path)
            self.reporter.model(path, self.dataset, self.features, self.last_step, precision)
        except Exception as exc:  # any exporter's failure: the run itself is not at fault
            said = (str(exc).strip().splitlines() or [""])[0][:300]
            print(
                f"mlbench-worker: note: the final model is not exported to ONNX "
                f"({type(exc).__name__}: {said}); the run is graded by its predictions alone "
                "(a language model's results stay its own word)",
                file=sys.stderr,
                flush=True,
            )
            path.unlink(missing_ok=True)
            return None
        finally:
            partial.unlink(missing_ok=True)
            if not kept:
                shutil.rmtree(where, ignore_errors=True)
        return path if kept else None


def open_sink(
    comm: Collectives,
    reporter: Reporter,
    *,
    metrics_file: str | None,
    master_url: str | None,
    dataset: str,
    features: int | None = None,
) -> PredictionSink:
    """The sink of a run with these reporting options (rank 0's decide, for every rank):
    `dataset` is what the run evaluated on (the task's real set's name, or "synthetic"),
    `features` task 2's features per row (None for the image tasks)."""
    beside = Path(metrics_file).resolve().parent / "predictions" if metrics_file else None
    folder, enabled = comm.bcast_object((beside, bool(metrics_file or master_url)))
    return PredictionSink(
        comm,
        reporter,
        folder=folder if comm.rank == 0 else None,
        dataset=dataset,
        features=features,
        enabled=enabled,
    )
