"""The table rank 0 prints at the end of a run counts what its task counts: images for task
1a, samples for task 2 (logreg-epsilon), in its throughput row and its data sizes."""

from mlbench_worker.training.summary_table import summary_table

VERSIONS = {"python": "3.11.2", "torch": "2.13.0", "mpi": "Open MPI v5.0.8", "mlbench": "0.2"}


def _summary(task: str, dataset: str, metric: str, counted: str, **more) -> dict:
    """A summary as mlbench_worker/training/run.py builds it for `task`."""
    return {
        "task": task, "model": task.split("-")[0], "dataset": dataset, "num_workers": 2,
        "backend": "mpi", "device": "cpu", "target": "light", "target_accuracy": 0.8,
        "reached": True, "time_to_target": 41.5, "final_val_accuracy": 0.83,
        "best_val_accuracy": 0.84, "epochs": 3.0, metric: 41234.5, "comm_share": 0.125,
        "elapsed": 60.0, "stop_reason": "target reached", "versions": VERSIONS,
        "config": {f"train_{counted}": 400000, f"test_{counted}": 100000, "batch_size": 128},
    } | more  # fmt: skip


def _rows(table: str) -> dict[str, str]:
    return {
        k.strip(): v.strip()
        for k, _, v in (line.partition(" : ") for line in table.splitlines() if " : " in line)
    }


def test_task_2_counts_samples():
    table = summary_table(_summary("logreg-epsilon", "epsilon", "samples_per_sec", "samples"))
    rows = _rows(table)
    assert rows["samples/s"] == "41234.5"
    assert rows["data"] == "400000 train / 100000 test samples"
    assert rows["task"] == "logreg-epsilon" and rows["dataset"] == "epsilon"
    assert "image" not in table.lower()


def test_task_1a_counts_images():
    summary = _summary("resnet20-cifar10", "cifar10", "images_per_sec", "images")
    summary |= {"images_per_sec": 612.0, "config": {"train_images": 50000, "test_images": 10000}}
    rows = _rows(summary_table(summary))
    assert rows["images/s"] == "612.0"
    assert rows["data"] == "50000 train / 10000 test images"
    assert "samples/s" not in rows


def test_synthetic_task_2_names_its_real_data_set():
    summary = _summary("logreg-epsilon", "synthetic", "samples_per_sec", "samples")
    assert _rows(summary_table(summary))["dataset"] == (
        "synthetic (generated; NOT the epsilon data set)"
    )


def test_a_task_the_catalogue_does_not_know_is_read_by_its_metric():
    summary = _summary("svm-epsilon", "epsilon", "samples_per_sec", "samples")
    rows = _rows(summary_table(summary))
    assert rows["samples/s"] == "41234.5" and "images/s" not in rows
    # Without a throughput or a config nothing is made up.
    bare = _summary("svm-epsilon", "epsilon", "other_per_sec", "x", config={})
    rows = _rows(summary_table(bare))
    assert rows["samples/s"] == "-" and "data" not in rows


def test_the_framework_and_implementation_are_the_runs_own():
    tf_versions = {"python": "3.11.2", "tensorflow": "2.21.0", "keras": "3.15.1", "mpi": "x"}
    summary = _summary("resnet20-cifar10", "synthetic", "images_per_sec", "images")
    summary |= {"versions": tf_versions, "implementation": "tensorflow", "comm_share": None}
    rows = _rows(summary_table(summary))
    assert rows["python / tensorflow"] == "3.11.2 / 2.21.0" and "python / torch" not in rows
    assert rows["implementation"] == "tensorflow"
    assert rows["comm share"] == "-"  # not measured: said, never made up
    reference = _rows(summary_table(_summary("resnet20-cifar10", "cifar10", "x", "images")))
    assert reference["python / torch"] == "3.11.2 / 2.13.0" and "implementation" not in reference
