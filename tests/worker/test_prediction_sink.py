"""An evaluation's predictions from the ranks' shards to the master: put back in the test
set's order (or refused when the shards do not cover it), written in the format, and posted
as bytes by the reporter to a real HTTP server on loopback, retried like metrics, and a
refusal said once and not retried. Whole runs that write them: test_mpi.py, test_ddp.py,
test_tensorflow_run.py, test_imagenet_mpirun.py, test_logreg.py, test_run.py."""

from __future__ import annotations

import io
import tempfile

import numpy as np
import pytest

from mlbench_worker.shared.evaluation import predictions
from mlbench_worker.shared.evaluation.evaluator import Evaluator
from mlbench_worker.shared.evaluation.predictions import digest_of
from mlbench_worker.training.metric_sink import HttpReporter
from mlbench_worker.training.prediction_sink import Shard, in_set_order, open_sink, publish

from .recording_master import RecordingMaster

CLASS, TOP5 = predictions.CLASS, predictions.TOP5


def strided(labels: np.ndarray, predicted: np.ndarray, ranks: int) -> list[Shard]:
    """The ranks' parts as the trainers take them: rank r holds rows r, r+K, ..."""
    return [
        Shard(np.arange(r, len(labels), ranks), labels[r::ranks], {CLASS: predicted[r::ranks]})
        for r in range(ranks)
    ]


@pytest.mark.parametrize("ranks", [1, 2, 3, 7])
def test_shards_come_back_in_the_sets_order(ranks):
    labels = np.arange(10) % 4
    predicted = np.array([3, 1, 2, 0, 0, 1, 2, 3, 0, 1])
    parts = strided(labels, predicted, ranks)
    got_labels, arrays = in_set_order(parts[::-1])  # the gather's order does not matter
    np.testing.assert_array_equal(got_labels, labels)
    np.testing.assert_array_equal(arrays[CLASS], predicted)
    assert list(arrays) == [CLASS]


def test_two_arrays_and_a_rank_without_rows():
    """Task 1b's two fields keep their rows together; a rank with nothing to evaluate (a
    test set smaller than the world) sends an empty part."""
    top5 = np.array([[i, i + 1, i + 2, i + 3, i + 4] for i in range(5)])
    parts = [
        Shard(np.array([1, 3]), np.array([9, 9]), {CLASS: top5[[1, 3], 0], TOP5: top5[[1, 3]]}),
        Shard(np.zeros(0, np.int64), np.zeros(0, np.int64)),
        Shard(np.array([0, 2, 4]), np.array([7, 7, 7]), {CLASS: top5[::2, 0], TOP5: top5[::2]}),
    ]
    labels, arrays = in_set_order(parts)
    np.testing.assert_array_equal(labels, [7, 9, 7, 9, 7])
    np.testing.assert_array_equal(arrays[TOP5], top5)
    np.testing.assert_array_equal(arrays[CLASS], top5[:, 0])


@pytest.mark.parametrize(
    "indices,first",
    [([[0, 2], [1, 2]], 2), ([[1, 3], [2, 4]], 0), ([[0, 1], [2, 2]], 2)],
)
def test_shards_that_miss_or_repeat_an_example_are_a_bug_said_so(indices, first):
    labels, rows = np.zeros(2, np.int64), {CLASS: np.zeros(2, np.int64)}
    with pytest.raises(RuntimeError) as refused:
        in_set_order([Shard(np.array(i), labels, rows) for i in indices])
    assert str(refused.value) == (
        "the ranks' test shards do not cover the 4 positions once each (first position "
        f"missing or repeated: {first})"
    )


def test_a_shard_whose_rows_do_not_match_its_positions_is_refused():
    bad = Shard(np.array([0, 1]), np.zeros(2, np.int64), {CLASS: np.zeros(3, np.int64)})
    with pytest.raises(RuntimeError, match="has 2 positions but rows of other lengths"):
        in_set_order([bad])


@pytest.fixture
def master():
    server = RecordingMaster()
    yield server
    server.stop()


def reporter_for(master: RecordingMaster) -> HttpReporter:
    return HttpReporter(
        master.url, "17", "tok-run", interval=0.05, backoff_start=0.05, backoff_max=0.2, timeout=5
    )


META = {"step": 40, "epoch": 2.0, "elapsed": 18.5}


def test_without_a_folder_the_file_is_posted_as_bytes_and_not_kept(master, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the temporary file goes
    labels, predicted = np.array([3, 8, 8, 0, 6]), np.array([3, 8, 1, 0, 6], np.int32)
    reporter = reporter_for(master)
    kept = publish(None, reporter, "synthetic", None, digest_of(labels), {CLASS: predicted}, META)
    reporter.close(deadline=30)
    assert kept is None and not list(tmp_path.iterdir())  # the temporary folder is gone
    (sent,) = master.posted("predictions")
    assert sent.path == "/api/runs/17/predictions/" and sent.query == {"dataset": "synthetic"}
    assert sent.headers["Content-Type"] == "application/octet-stream"
    assert sent.headers["Authorization"] == "Token tok-run"  # the run's token, as for metrics
    with np.load(io.BytesIO(sent.body), allow_pickle=False) as npz:
        assert str(npz["format"]) == predictions.FORMAT and int(npz["step"]) == 40
        assert str(npz["test_set_digest"]) == predictions.digest_of(labels)
        np.testing.assert_array_equal(npz[CLASS], predicted)
    assert reporter.files_sent == 1 and reporter.files_refused == 0


def test_a_refusal_is_said_once_and_not_retried_an_outage_is_retried(master, tmp_path, capsys):
    """The master's 400 names the problem: printed once on stderr, the file dropped. A 503
    (busy) is retried with the same bytes. Task 2's files carry their features per row."""
    master.answers = [
        (400, {"predictions": "predictions for another test set (digest 0123...)"}),
        (503, {"detail": "busy"}),
        (201, {"step": 41}),
    ]
    reporter = reporter_for(master)
    labels = np.array([1, -1, 1, 1])
    signs = {predictions.LABEL: np.array([1, 1, 1, -1], np.int8)}
    publish(tmp_path, reporter, "synthetic", 2000, digest_of(labels), signs, META)
    publish(tmp_path, reporter, "synthetic", 2000, digest_of(labels), signs, META | {"step": 41})
    reporter.close(deadline=30)
    sent = master.posted("predictions")
    assert [r.query for r in sent] == [{"dataset": "synthetic", "features": "2000"}] * 3
    assert sent[1].body == sent[2].body == (tmp_path / predictions.file_name(41)).read_bytes()
    assert sent[0].body == (tmp_path / predictions.file_name(40)).read_bytes()
    err = capsys.readouterr().err
    assert err.count("refused the predictions predictions-step0000000040.npz: HTTP 400") == 1
    assert "predictions: predictions for another test set (digest 0123...)" in err
    assert reporter.files_refused == 1 and reporter.files_sent == 1
    # What was kept in the folder is what the evaluator reads.
    grade = Evaluator("logreg-epsilon", labels).grade(tmp_path / predictions.file_name(41))
    assert grade.metrics == {"val_accuracy": 0.5} and grade.step == 41


def test_a_master_without_the_endpoint_is_asked_once(master, tmp_path, capsys):
    """A master that answers 404 (one older than the predictions) is not sent the run's
    next files: one refusal and one line saying so, not a line per evaluation."""
    master.answers = [(404, {"detail": "Not found."})]
    reporter = reporter_for(master)
    labels = {CLASS: np.array([1, 2])}
    publish(tmp_path, reporter, "cifar10", None, digest_of(np.array([1, 2])), labels, META)
    publish(
        tmp_path,
        reporter,
        "cifar10",
        None,
        digest_of(np.array([1, 2])),
        labels,
        META | {"step": 41},
    )
    reporter.close(deadline=30)
    assert len(master.posted("predictions")) == 1 and not reporter.takes_predictions
    assert not reporter.files and reporter.files_sent == 0
    err = capsys.readouterr().err
    assert err.count("HTTP 404") == 1 and err.count("takes no predictions files") == 1


class OneRank:
    """The collectives of a run of one rank: nothing to gather from others."""

    rank = 0

    def bcast_object(self, obj, root=0):
        return obj

    def gather_object(self, obj, root=0):
        return [obj]


def test_the_final_model_is_kept_beside_and_posted_after_the_last_predictions(master, tmp_path):
    reporter = reporter_for(master)
    sink = open_sink(
        OneRank(), reporter, metrics_file=str(tmp_path / "metrics.jsonl"), master_url=master.url,
        dataset="synthetic", features=2000,
    )  # fmt: skip
    labels = np.array([1, -1, 1])
    sink.submit(Shard(np.arange(3), labels, {predictions.LABEL: labels}), META)
    final = tmp_path / "model.onnx"
    final.write_bytes(b"an earlier run's model")

    def export(path):  # a reader meanwhile sees the earlier file whole, never half of this one
        assert path.parent == tmp_path and path != final
        path.write_bytes(b"onnx")
        assert final.read_bytes() == b"an earlier run's model"
        path.write_bytes(b"onnx bytes")

    kept = sink.submit_model(export, precision="bf16")
    reporter.close(deadline=30)
    assert kept == final and kept.read_bytes() == b"onnx bytes"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx", "predictions"]
    posts = [r for r in master.received if not r.path.endswith("/metrics/")]
    assert [r.path for r in posts] == ["/api/runs/17/predictions/", "/api/runs/17/model/"]
    # Bound to the evaluation it made: its step, and the precision it was evaluated in.
    assert posts[1].query == {
        "dataset": "synthetic", "features": "2000", "step": "40", "precision": "bf16"
    }  # fmt: skip
    assert posts[1].body == b"onnx bytes" and posts[1].headers["Authorization"] == "Token tok-run"


def test_a_model_that_does_not_export_is_said_and_not_posted(master, tmp_path, capsys):
    reporter = reporter_for(master)
    sink = open_sink(
        OneRank(), reporter, metrics_file=None, master_url=master.url, dataset="synthetic"
    )
    labels = np.array([1, -1, 1])
    sink.submit(Shard(np.arange(3), labels, {predictions.LABEL: labels}), META)

    def fails(path):
        path.write_bytes(b"half")
        raise RuntimeError("Exporting the operator 'aten::foo' is not supported\nmore")

    assert sink.submit_model(fails) is None
    reporter.close(deadline=30)
    assert master.posted("model") == [] and len(master.posted("predictions")) == 1
    err = capsys.readouterr().err
    assert "the final model is not exported to ONNX (RuntimeError: Exporting the operator" in err
    assert "graded by its predictions alone" in err and "more" not in err
