"""One TensorFlow run on one rank: set up, train (train.py), summarise, report.

The order matters to TensorFlow: threads and visible devices are set, the data set agreed
over MPI (it may be downloaded, possibly through a proxy, before TensorFlow's gRPC exists),
then TF_CONFIG is exported and the strategy created, and only then the model is built in
its scope (the strategy broadcasts worker 0's initial weights, so every rank starts from
the same model). The summary has the keys of the reference's (mlbench_worker/training/run.py), with
`implementation` "tensorflow" and TensorFlow's and Keras's versions.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from tensorflow import keras

from mlbench_worker.data import synthetic_banner
from mlbench_worker.data.images import CIFAR10_MEAN, CIFAR10_STD, channel_stats
from mlbench_worker.implementations.tensorflow import cluster
from mlbench_worker.implementations.tensorflow.data import ImageBatches
from mlbench_worker.implementations.tensorflow.keras_export import export_final
from mlbench_worker.implementations.tensorflow.model import build_model
from mlbench_worker.implementations.tensorflow.steps import Steps
from mlbench_worker.implementations.tensorflow.train import Trainer
from mlbench_worker.shared.result import training_summary
from mlbench_worker.tasks import get_task
from mlbench_worker.tasks.cifar10.data import load_dataset
from mlbench_worker.training import environment
from mlbench_worker.training.config import RunConfig
from mlbench_worker.training.metric_sink import make_reporter
from mlbench_worker.training.prediction_sink import open_sink
from mlbench_worker.training.progress import finite, outcome
from mlbench_worker.training.recipe import Goal, Schedule, scaled_rates
from mlbench_worker.training.summary_table import summary_table

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
    task = get_task(config.task)
    rank0 = control.rank == 0

    def say(line: str) -> None:
        if rank0:
            print(line, flush=True)

    if config.checkpoint_dir:
        say(
            f"note: --checkpoint-dir {config.checkpoint_dir}: the tensorflow implementation "
            "writes no checkpoints; the run goes on without them"
        )
    threads = config.threads or environment.default_threads()
    cluster.set_threads(threads)
    device = cluster.pick_device(config.device, control)
    collective = cluster.collective_name(device)
    if config.backend != "mpi":
        say(
            f"note: --backend {config.backend} is not used: the strategy's collective ops "
            f"({collective}) carry the all-reduce"
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
    a = data.arrays
    mean, std = (CIFAR10_MEAN, CIFAR10_STD) if data.name == "cifar10" else channel_stats(a.train_x)
    train_data = ImageBatches(a.train_x, a.train_y, config.batch_size, mean, std, augment=True)
    test_data = ImageBatches(a.test_x, a.test_y, EVAL_BATCH, mean, std, augment=False)

    hostnames = control.allgather_object(environment.hostname())
    cluster.export_cluster(cluster.cluster_config(control, hostnames))
    strategy = cluster.make_strategy(device)
    keras.utils.set_random_seed(config.seed)
    with strategy.scope():
        model = build_model(config.model)
    steps = Steps(strategy, model, task.momentum, task.weight_decay)
    start_lr, peak_lr = scaled_rates(task, config.batch_size, control.size, config.lr)
    goal = Goal(
        config.target, task.target_accuracy(config.target), config.max_epochs, config.time_budget
    )
    if rank0:
        reporter = make_reporter(
            config.master_url, config.run_id, config.token, config.metrics_file
        )
    else:
        reporter = make_reporter(None, config.run_id, None, None)
    trainer = Trainer(
        steps,
        Schedule(0.0, 0.0, 0, (), 1.0),  # replaced below, once steps are known
        goal,
        control,
        train_data,
        test_data,
        reporter,
        seed=config.seed,
        task=task.name,
        log_every=config.log_every,
    )
    trainer.predictions = open_sink(
        control,
        reporter,
        metrics_file=config.metrics_file,
        master_url=config.master_url,
        dataset=data.name,
    )
    per_epoch = trainer.steps_per_epoch
    trainer.schedule = Schedule.of_task(task, start_lr, peak_lr, per_epoch)
    steps.warm_up()

    say(
        f"{task.name}: model {config.model}, data {data.name} ({len(train_data)} train / "
        f"{len(test_data)} test images), {control.size} worker(s), implementation tensorflow "
        f"(TensorFlow {tf.__version__}, MultiWorkerMirroredStrategy, {collective} all-reduce), "
        f"device {device}, {threads} thread(s)/rank, batch {config.batch_size}/worker, "
        f"peak lr {peak_lr:g}, algorithm allreduce, target {config.target} "
        f"({goal.describe()}), max {goal.max_epochs} epochs"
        + (f", time budget {config.time_budget:g}s" if config.time_budget else "")
    )
    try:
        progress = trainer.fit()
        elapsed = trainer.elapsed()
        export_final(trainer)  # off the clock: after its end
        mine = [progress.time_data, progress.time_compute, progress.time_comm]
        totals = np.sum(control.allgather_object(mine), axis=0)
        step_total = float(totals.sum())
        share = float(totals[2] / step_total) if step_total > 0 else 0.0
        bytes_per_step = float(trainer.step_bytes)
        summary = training_summary(
            task=task.name,
            model=config.model,
            dataset=data.name,
            num_workers=control.size,
            backend=collective,
            device=device,
            target=config.target,
            outcome=outcome(progress, goal.accuracy),
            throughput=finite(trainer.throughput()),
            comm_share=share,
            comm_share_total=share,  # never overlapped: all of it is exposed
            algorithm="allreduce",
            algorithm_options=dict(config.algorithm_options),
            implementation="tensorflow",
            comm_bytes_per_step=bytes_per_step,
            full_allreduce_bytes=trainer.full_allreduce_bytes,
            elapsed=elapsed,
            seed=config.seed,
            versions=environment.versions(
                {"tensorflow": tf.__version__, "keras": keras.__version__}
            ),
            hardware={
                **environment.host_hardware(threads, hostnames),
                **cluster.gpu_info(device),
            },
            stop_reason=progress.stop_reason,
            run_id=config.run_id,
            dataset_note=data.note,
            implementation_note=NOTE.format(
                tf=tf.__version__, keras=keras.__version__, collective=collective
            ),
            config={
                "batch_size": config.batch_size,
                "peak_lr": peak_lr,
                "max_epochs": config.max_epochs,
                "time_budget": config.time_budget,
                "train_images": len(train_data),
                "test_images": len(test_data),
                "amp": False,
                "channels_last": False,
                "overlap": False,
                "bucket_mb": None,
                "buckets": None,
                "threads": threads,
            },
        )
        if rank0:
            reporter.summary(summary)
            print(summary_table(summary), flush=True)
    finally:
        reporter.close()
    return 0
