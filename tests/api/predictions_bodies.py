"""Predictions files and requests for the tests of POST /api/runs/<id>/predictions/
(test_predictions.py, test_predictions_refused.py)."""

from __future__ import annotations

import io

import numpy as np

from mlbench_master.api.models import Metric
from mlbench_master.grading import prediction_files
from mlbench_worker.shared.evaluation import generated_labels, predictions
from mlbench_worker.shared.evaluation.predictions import digest_of

CIFAR = "resnet20-cifar10"
N = 500
SEED = 7
WRONG = [3, 17, 40, 41, 42, 99, 123, 250, 251, 499]  # rows predicted wrong: 490/500 right


def npz(*, digest: str, step: int = 100, epoch: float = 1.5, elapsed: float = 30.25, **arrays):
    """A predictions file's bytes, as np.savez writes them (any array, even a bad one)."""
    buf = io.BytesIO()
    np.savez(
        buf,
        format=np.array(predictions.FORMAT),
        test_set_digest=np.array(digest),
        step=np.array(step),
        epoch=np.array(epoch),
        elapsed=np.array(elapsed),
        **arrays,
    )
    return buf.getvalue()


def cifar_labels(seed: int = SEED, n: int = N) -> np.ndarray:
    return generated_labels.cifar10(seed, n)


def cifar_file(step: int = 100, wrong=WRONG, labels=None) -> bytes:
    labels = cifar_labels() if labels is None else labels
    predicted = labels.copy()
    predicted[wrong] = (predicted[wrong] + 1) % 10
    return npz(digest=digest_of(labels), step=step, predicted_class=predicted)


def post(client, run, body: bytes, query: str = "dataset=synthetic"):
    return client.post(
        f"/api/runs/{run.pk}/predictions/?{query}", body, content_type="application/octet-stream"
    )


def grades(run) -> list[tuple[str, float, dict]]:
    rows = Metric.objects.filter(run=run, name__startswith="evaluated_").order_by("name", "id")
    return [(m.name, m.value, m.metadata) for m in rows]


def stored_files(run) -> dict[str, bytes]:
    folder = prediction_files.folder(run.pk)
    if not folder.exists():
        return {}
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}
