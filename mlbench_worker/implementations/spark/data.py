"""Task 2's data for Spark: the same rows as the reference's, as LIBSVM text read by Spark's
own reader, cut into the reference's shards.

The files: epsilon's rows (from the reference's cache, tasks/epsilon/reader.py) or the same
generated set (tasks/epsilon/synthetic.py), the first `--train-images`/`--test-images` rows,
written once as LIBSVM text with 1-based indices and labels -1/+1 (epsilon's own format)
under the data folder. Every rank writes them where they are missing (under a temporary
name, then renamed), so executors on any machine read the same path; on one machine the
ranks find each other's files.

In Spark: `spark.read.format("libsvm")` reads them; each row gets its place in the file
(zipWithIndex), then the partition of the reference rank that holds it (shards.partition for
training, every K-th row for the test set) and its place in that rank's shard; partitionBy
puts rank r's rows into partition r, and each partition becomes one numpy block
(blocks.to_block), cached in the executors' memory. The labels stay -1/+1 for the SGD
(the task's convention, the reference's arithmetic); MLlib's classifier wants 0/1, so the
L-BFGS trainer maps y to (y + 1) / 2 (`labelled_frame`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mlbench_worker.data import DataUnavailable
from mlbench_worker.implementations.spark import blocks
from mlbench_worker.tasks.epsilon import reader, synthetic
from mlbench_worker.tasks.epsilon.shards import partition, test_indices
from mlbench_worker.training.errors import WorkerError

FOLDER = "spark-libsvm"


@dataclass
class Files:
    """The run's LIBSVM files and what they hold."""

    name: str  # "epsilon" or "synthetic"
    train: Path
    test: Path
    train_rows: int
    test_rows: int
    features: int
    note: str = ""  # why synthetic was used, when it was a fallback


def choose(config: Any, control: Any, features: int, say: Callable[[str], None]) -> str:
    """Which set the run uses, agreed by every rank: rank 0 tries epsilon (reader.prepare:
    cache, text, download); `auto` falls back to the generated set. Returns the reason of
    a fallback, or "" (epsilon), or "synthetic" as asked."""
    if config.dataset == "synthetic":
        return "synthetic"
    why = ""
    if control.rank == 0:
        try:
            reader.prepare(Path(config.data_dir), features=features, say=say)
        except (DataUnavailable, WorkerError) as exc:
            why = str(exc) or type(exc).__name__
    why = control.bcast_object(why)
    if why and config.dataset != "auto":
        raise WorkerError(f"--dataset {config.dataset}: {why}", exit_code=1)
    return f"epsilon could not be had: {why}" if why else ""


def write_files(config: Any, task: Any, control: Any, say: Callable[[str], None]) -> Files:
    """The run's files, written where missing (module docstring)."""
    features = task.features
    choice = choose(config, control, features, say)
    data_dir = Path(config.data_dir)
    if choice == "":
        infos = {s: reader.read_info(data_dir, s) for s in reader.SPLITS}
        n_train = min(infos[reader.TRAIN].rows, config.train_images or infos[reader.TRAIN].rows)
        n_test = min(infos[reader.TEST].rows, config.test_images or infos[reader.TEST].rows)
        name, note = "epsilon", ""

        def rows(split: str, n: int) -> tuple[np.ndarray, np.ndarray]:
            return reader.read_rows(data_dir, split, np.arange(n))
    else:
        n_train = config.train_images or task.train_rows
        n_test = config.test_images or task.test_rows
        name, note = "synthetic", "" if choice == "synthetic" else choice

        def rows(split: str, n: int) -> tuple[np.ndarray, np.ndarray]:
            return synthetic.rows(config.seed, split, n, np.arange(n), features)

    if n_train < control.size:
        raise WorkerError(
            f"the training set has {n_train} rows, fewer than the {control.size} workers",
            exit_code=1,
        )
    key = f"{name}-seed{config.seed}" if name == "synthetic" else name
    folder = data_dir / FOLDER / f"{key}-{n_train}x{n_test}"
    paths = {}
    for split, n in ((reader.TRAIN, n_train), (reader.TEST, n_test)):
        path = folder / f"{split}.libsvm"
        if not path.exists():
            folder.mkdir(parents=True, exist_ok=True)
            _dump(path, *rows(split, n))
        paths[split] = path
    control.quiet_barrier()
    return Files(name, paths[reader.TRAIN], paths[reader.TEST], n_train, n_test, features, note)


def _dump(path: Path, x: np.ndarray, y: np.ndarray) -> None:
    """LIBSVM text, 1-based (Spark's reader wants it so), under a temporary name, renamed."""
    from sklearn.datasets import dump_svmlight_file

    partial = path.with_name(f".{path.name}.{os.getpid()}")
    dump_svmlight_file(x, y.astype(np.int8), str(partial), zero_based=False)
    os.replace(partial, path)


def keyed_rows(spark: Any, files: Files, split: str, world: int, seed: int) -> Any:
    """The rows of `split` as (rank, (place in its shard, features, label -1/+1, row)),
    rows outside every shard dropped, in `world` partitions (partition r: rank r's rows)."""
    train = split == reader.TRAIN
    n = files.train_rows if train else files.test_rows
    owner = np.full(n, -1, np.int32)
    place = np.zeros(n, np.int64)
    for rank in range(world):
        rows = partition(n, rank, world, seed) if train else test_indices(n, rank, world)
        owner[rows] = rank
        place[rows] = np.arange(rows.size)
    sc = spark.sparkContext
    table = sc.broadcast((owner, place))
    path = str(files.train if train else files.test)
    frame = spark.read.format("libsvm").option("numFeatures", files.features).load(path)

    def key(pair: tuple) -> tuple:
        (label, vector), row = pair
        owners, places = table.value
        return int(owners[row]), (int(places[row]), vector, float(label), row)

    keyed = (
        frame.select("label", "features").rdd.zipWithIndex().map(key).filter(lambda kv: kv[0] >= 0)
    )
    return keyed.partitionBy(world, lambda rank: rank)


def cached_blocks(keyed: Any) -> Any:
    """One cached numpy block per partition (blocks.to_block), materialised now."""
    from pyspark import StorageLevel

    cached = keyed.mapPartitionsWithIndex(blocks.to_block).persist(StorageLevel.MEMORY_ONLY)
    cached.count()
    return cached


def labelled_frame(spark: Any, keyed: Any) -> Any:
    """The training rows as MLlib's classifiers take them: label (y + 1) / 2, features,
    cached and materialised now."""
    frame = keyed.map(lambda kv: ((kv[1][2] + 1.0) / 2.0, kv[1][1])).toDF(["label", "features"])
    frame = frame.cache()
    frame.count()
    return frame
