"""One TensorFlow run on one rank: the TensorFlow implementation's parts of the rank body.

The steps every implementation's rank takes (reporter, set-up, predictions, training, the
record, the final model) are training/rank_body.py's; `TensorFlowRank` supplies what
TensorFlow does its own way. The order of its set-up matters to TensorFlow: threads and
visible devices are set, the data set agreed over MPI (it may be downloaded, possibly
through a proxy, before TensorFlow's gRPC exists), then TF_CONFIG is exported and the
strategy created, and only then the model is built in its scope (the strategy broadcasts
worker 0's initial weights, so every rank starts from the same model). The record has the
reference's fields, with `implementation` "tensorflow", TensorFlow's and Keras's versions
and the implementation's note.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tensorflow as tf
from tensorflow import keras

from mlbench_worker.data import synthetic_banner
from mlbench_worker.data.images import CIFAR10_MEAN, CIFAR10_STD, channel_stats, epoch_steps
from mlbench_worker.implementations.tensorflow import cluster
from mlbench_worker.implementations.tensorflow.data import ImageBatches
from mlbench_worker.implementations.tensorflow.keras_export import export_final
from mlbench_worker.implementations.tensorflow.model import build_model
from mlbench_worker.implementations.tensorflow.steps import Steps
from mlbench_worker.implementations.tensorflow.train import Trainer
from mlbench_worker.tasks import get_task
from mlbench_worker.tasks.cifar10.data import load_dataset
from mlbench_worker.training import environment, rank_body
from mlbench_worker.training.config import RunConfig
from mlbench_worker.training.metric_sink import Reporter
from mlbench_worker.training.progress import Progress
from mlbench_worker.training.rank_body import Say, Setup
from mlbench_worker.training.recipe import Goal, Schedule, scaled_rates
from mlbench_worker.training.run_record import RunFacts, comm_shares

EVAL_BATCH = 500  # the reference's (tasks/cifar10/setup.py)
NOTE = (
    "TensorFlow {tf} with Keras {keras}, MultiWorkerMirroredStrategy ({collective}). Equal "
    "to the reference: data, shards and their order, augmentation kind, architecture, "
    "batch, schedule, SGD (torch's update, written out), goal tracking. Not equal: the "
    "random draws (initial weights by Keras's generators, crops and flips by numpy's), "
    "batch norm's running variance (biased in Keras). The step is three tf.functions "
    "(forward and backward; the strategy's all-reduce; the SGD update), so comm is the "
    "all-reduce's own time, never overlapped with backward (TensorFlow's collective waits "
    "for every gradient), and comm_share_total equals comm_share."
)


def run(config: RunConfig, control: cluster.Control) -> int:
    """Train task 1a with TensorFlow on this rank; 0, or raises (see run_main)."""
    return rank_body.run(config, TensorFlowRank(config, control))


class TensorFlowRank:
    """The TensorFlow implementation's parts of a rank's run (rank_body.Implementation)."""

    def __init__(self, config: RunConfig, control: cluster.Control) -> None:
        self.config, self.control = config, control
        self.rank = control.rank
        self.collectives = control
        self.task = get_task(config.task)

    def build(self, say: Say, open_reporter: Callable[[], Reporter]) -> Setup:
        config, control, task = self.config, self.control, self.task
        if config.checkpoint_dir:
            say(
                f"note: --checkpoint-dir {config.checkpoint_dir}: the tensorflow implementation "
                "writes no checkpoints; the run goes on without them"
            )
        self.threads = config.threads or environment.default_threads()
        cluster.set_threads(self.threads)
        self.device = cluster.pick_device(config.device, control)
        self.collective = cluster.collective_name(self.device)
        if config.backend != "mpi":
            say(
                f"note: --backend {config.backend} is not used: the strategy's collective ops "
                f"({self.collective}) carry the all-reduce"
            )

        data = load_dataset(
            config.dataset,
            config.data_dir,
            config.seed,
            control,
            config.train_images,
            config.test_images,
        )
        if data.name == "synthetic":
            synthetic_banner(say, "CIFAR-10", data.note)
        self.data = data
        a = data.arrays
        cifar10 = data.name == "cifar10"
        mean, std = (CIFAR10_MEAN, CIFAR10_STD) if cifar10 else channel_stats(a.train_x)
        train_data = ImageBatches(a.train_x, a.train_y, config.batch_size, mean, std, augment=True)
        test_data = ImageBatches(a.test_x, a.test_y, EVAL_BATCH, mean, std, augment=False)

        self.hostnames = control.allgather_object(environment.hostname())
        cluster.export_cluster(cluster.cluster_config(control, self.hostnames))
        strategy = cluster.make_strategy(self.device)
        keras.utils.set_random_seed(config.seed)
        with strategy.scope():
            model = build_model(config.model)
        self.steps = Steps(strategy, model, task.momentum, task.weight_decay)
        start_lr, self.peak_lr = scaled_rates(task, config.batch_size, control.size, config.lr)
        self.trainer = Trainer(
            self.steps,
            Schedule.of_task(task, start_lr, self.peak_lr, epoch_steps(train_data, control.size)),
            Goal(
                config.target,
                task.target_accuracy(config.target),
                config.max_epochs,
                config.time_budget,
            ),
            control,
            train_data,
            test_data,
            open_reporter(),
            seed=config.seed,
            task=task.name,
            log_every=config.log_every,
        )
        return Setup(self.trainer, data.name)

    def before_training(self, say: Say) -> None:
        self.steps.warm_up()

    def headline(self) -> str:
        config, trainer = self.config, self.trainer
        goal = trainer.goal
        return (
            f"{self.task.name}: model {config.model}, data {self.data.name} "
            f"({len(trainer.train_data)} train / {len(trainer.test_data)} test images), "
            f"{self.control.size} worker(s), implementation tensorflow "
            f"(TensorFlow {tf.__version__}, MultiWorkerMirroredStrategy, {self.collective} "
            f"all-reduce), device {self.device}, {self.threads} thread(s)/rank, "
            f"batch {config.batch_size}/worker, peak lr {self.peak_lr:g}, algorithm allreduce, "
            f"target {config.target} ({goal.describe()}), max {goal.max_epochs} epochs"
            + (f", time budget {config.time_budget:g}s" if config.time_budget else "")
        )

    def facts(self, progress: Progress) -> RunFacts:
        trainer = self.trainer
        mine = [progress.time_data, progress.time_compute, progress.time_comm]
        mine.append(progress.comm_bytes_at_target or 0.0)
        totals = np.sum(self.control.allgather_object(mine), axis=0)
        share, _ = comm_shares(*totals[:3])  # never overlapped: all of it is exposed
        reached = progress.time_to_target is not None
        return RunFacts(
            dataset=self.data.name,
            dataset_note=self.data.note,
            num_workers=self.control.size,
            backend=self.collective,
            device=self.device,
            threads=self.threads,
            peak_lr=self.peak_lr,
            comm_share=share,
            comm_share_total=share,
            comm_bytes_per_step=float(trainer.step_bytes),
            comm_bytes_to_target=float(totals[3] / self.control.size) if reached else None,
            full_allreduce_bytes=trainer.full_allreduce_bytes,
            versions=environment.versions(
                {"tensorflow": tf.__version__, "keras": keras.__version__}
            ),
            hardware={
                **environment.host_hardware(self.threads, self.hostnames),
                **cluster.gpu_info(self.device),
            },
            config={
                "train_images": len(trainer.train_data),
                "test_images": len(trainer.test_data),
                "amp": False,
                "channels_last": False,
                "overlap": False,
                "bucket_mb": None,
                "buckets": None,
            },
            implementation_note=NOTE.format(
                tf=tf.__version__, keras=keras.__version__, collective=self.collective
            ),
        )

    def footer(self, summary: dict) -> str:
        return ""

    def export(self) -> None:
        export_final(self.trainer)  # rank 0; off the clock, after the summary
