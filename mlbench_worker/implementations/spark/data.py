"""Task 2's data for Spark: the same rows as the reference's, in the reference's shards.

epsilon: its rows (from the reference's cache, tasks/epsilon/reader.py), the first
`--train-images`/`--test-images`, written once as LIBSVM text with 1-based indices and labels
-1/+1 (epsilon's own format) under the data folder, by every rank where missing (under a
temporary name, then renamed), so executors on any machine read the same path. Spark's own
reader (`spark.read.format("libsvm")`) reads them; each row gets its place in the file
(zipWithIndex), the reference rank that holds it (shards.partition for training, every K-th
row for the test set) and its place in that rank's shard; partitionBy puts rank r's rows into
partition r, which its executor stores as one block (blocks.py says where and why).

The generated set (tasks/epsilon/synthetic.py): each executor makes its own partition's
block, the same rows the reference rank makes (no text in between: 400,000 rows of 2,000
features would be 10 GB of it).

Either way the cached RDD is one `BlockSpec` per partition. The labels stay -1/+1 for the SGD
(the task's convention, the reference's arithmetic); MLlib's classifier wants 0/1, so the
L-BFGS trainer's frame maps y to (y + 1) / 2 (`labelled_frame`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mlbench_worker.data import DataUnavailable
from mlbench_worker.implementations.spark import blocks
from mlbench_worker.tasks.epsilon import reader
from mlbench_worker.tasks.epsilon.shards import partition, test_indices
from mlbench_worker.training.errors import WorkerError

FOLDER = "spark-libsvm"  # epsilon's rows as LIBSVM text
BLOCKS = "spark-blocks"  # the partitions' blocks (blocks.py)


@dataclass
class Files:
    """The run's LIBSVM files and what they hold."""

    name: str  # "epsilon" or "synthetic"
    train: Path | None  # LIBSVM files (None: the generated set)
    test: Path | None
    train_rows: int
    test_rows: int
    features: int
    blocks: Path  # where executors keep their partitions' blocks
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
    """The run's source: LIBSVM files of epsilon's rows (written where missing, module
    docstring), or the generated set's sizes (no files)."""
    features = task.features
    choice = choose(config, control, features, say)
    data_dir = Path(config.data_dir)
    if choice != "":
        n_train = config.train_images or task.train_rows
        n_test = config.test_images or task.test_rows
        _enough(n_train, control.size)
        note = "" if choice == "synthetic" else choice
        blocks_at = data_dir / BLOCKS / f"synthetic-seed{config.seed}-{n_train}x{n_test}"
        return Files("synthetic", None, None, n_train, n_test, features, blocks_at, note)
    infos = {s: reader.read_info(data_dir, s) for s in reader.SPLITS}
    n_train = min(infos[reader.TRAIN].rows, config.train_images or infos[reader.TRAIN].rows)
    n_test = min(infos[reader.TEST].rows, config.test_images or infos[reader.TEST].rows)
    _enough(n_train, control.size)
    folder = data_dir / FOLDER / f"epsilon-{n_train}x{n_test}"
    paths = {}
    for split, n in ((reader.TRAIN, n_train), (reader.TEST, n_test)):
        path = folder / f"{split}.libsvm"
        if not path.exists():
            folder.mkdir(parents=True, exist_ok=True)
            _dump(path, *reader.read_rows(data_dir, split, np.arange(n)))
        paths[split] = path
    control.quiet_barrier()
    blocks_at = data_dir / BLOCKS / f"epsilon-seed{config.seed}-{n_train}x{n_test}"
    return Files("epsilon", paths[reader.TRAIN], paths[reader.TEST], n_train, n_test, features,
                 blocks_at)  # fmt: skip


def _enough(n_train: int, workers: int) -> None:
    if n_train < workers:
        raise WorkerError(
            f"the training set has {n_train} rows, fewer than the {workers} workers: every "
            "worker needs at least one",
            exit_code=1,
        )


def _dump(path: Path, x: np.ndarray, y: np.ndarray) -> None:
    """LIBSVM text, 1-based (Spark's reader wants it so), under a temporary name, renamed."""
    from sklearn.datasets import dump_svmlight_file

    partial = path.with_name(f".{path.name}.{os.getpid()}")
    dump_svmlight_file(x, y.astype(np.int8), str(partial), zero_based=False)
    os.replace(partial, path)


def specs(files: Files, split: str, world: int, seed: int) -> list[blocks.BlockSpec]:
    """One BlockSpec per partition of `split`."""
    total = files.train_rows if split == reader.TRAIN else files.test_rows
    generated = None if files.train is not None else (seed, total, files.features)
    return [
        blocks.BlockSpec(str(files.blocks), split, rank, world, generated) for rank in range(world)
    ]


def cached_blocks(spark: Any, files: Files, split: str, world: int, seed: int) -> Any:
    """The cached RDD of `split`'s BlockSpecs (partition r: rank r's rows), every block made
    on its executor now (module docstring)."""
    from pyspark import StorageLevel

    wanted = specs(files, split, world, seed)
    if files.train is None:
        made = spark.sparkContext.parallelize(wanted, world).mapPartitions(blocks.materialise)
    else:
        made = keyed_rows(spark, files, split, world, seed).mapPartitionsWithIndex(
            functools.partial(blocks.to_block, wanted.__getitem__)
        )
    made = made.persist(StorageLevel.MEMORY_ONLY)
    made.count()
    return made


def keyed_rows(spark: Any, files: Files, split: str, world: int, seed: int) -> Any:
    """The rows of `split` read by Spark's LIBSVM reader, as (rank, (place in its shard,
    features float32, label -1/+1, row)), rows outside every shard dropped, in `world`
    partitions (partition r: rank r's rows)."""
    train = split == reader.TRAIN
    n = files.train_rows if train else files.test_rows
    owner = np.full(n, -1, np.int32)
    place = np.zeros(n, np.int64)
    for rank in range(world):
        rows = partition(n, rank, world, seed) if train else test_indices(n, rank, world)
        owner[rows] = rank
        place[rows] = np.arange(rows.size)
    table = spark.sparkContext.broadcast((owner, place))
    path = str(files.train if train else files.test)
    frame = spark.read.format("libsvm").option("numFeatures", files.features).load(path)

    def key(pair: tuple) -> tuple:
        (label, vector), row = pair
        owners, places = table.value
        # Dense float32 before the shuffle: a third of the bytes of the reader's vectors.
        features = vector.toArray().astype(np.float32)
        return int(owners[row]), (int(places[row]), features, float(label), row)

    keyed = (
        frame.select("label", "features").rdd.zipWithIndex().map(key).filter(lambda kv: kv[0] >= 0)
    )
    return keyed.partitionBy(world, lambda rank: rank)


def labelled_frame(spark: Any, train_blocks: Any) -> Any:
    """The training rows as MLlib's classifiers take them (label (y + 1) / 2, features),
    from the blocks, cached and materialised now."""

    def rows(items: Any) -> Any:
        from pyspark.ml.linalg import Vectors

        for spec in items:
            x, y, _ = blocks.load(spec)
            for i in range(y.size):
                yield (float(y[i]) + 1.0) / 2.0, Vectors.dense(x[i].astype(np.float64))

    frame = train_blocks.mapPartitions(rows).toDF(["label", "features"]).cache()
    frame.count()
    return frame
