"""One benchmark run on one rank: set up, train (trainer.py), summarise, report.

Every task is set up the same way (build.build_run: the task names its own set-up module,
e.g. mlbench_worker/tasks/cifar10/setup.py for task 1a); checkpoints, the headline, the clock, the
summary and reporting are the same code for all.

How the rank ends (an error printed once, or a traceback and the whole job aborted) is
entry.py's, the same for every implementation.
"""

from __future__ import annotations

import torch

from mlbench_worker.shared.algorithm_catalogue import describe
from mlbench_worker.shared.result import training_summary
from mlbench_worker.tasks import get_task
from mlbench_worker.training import checkpoint, environment
from mlbench_worker.training.build import build_run
from mlbench_worker.training.comm import Communicator, local_rank
from mlbench_worker.training.config import RunConfig
from mlbench_worker.training.entry import World, run_rank
from mlbench_worker.training.environment import default_threads  # torch-free there, shared
from mlbench_worker.training.errors import WorkerError
from mlbench_worker.training.metric_sink import Reporter, make_reporter
from mlbench_worker.training.prediction_sink import open_sink
from mlbench_worker.training.progress import finite, outcome
from mlbench_worker.training.summary_table import summary_table
from mlbench_worker.training.torch_export import export_final
from mlbench_worker.training.trainer import Trainer


def pick_device(requested: str) -> torch.device:
    """cpu, or this rank's GPU (ranks on one machine take GPUs round-robin)."""
    if requested == "cpu" or (requested == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise WorkerError(
            "--device cuda: no CUDA device is visible (torch.cuda.is_available() is False); "
            "use --device cpu"
        )
    index = local_rank() % torch.cuda.device_count()
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def run_main(config: RunConfig) -> int:
    """Entry point after option parsing; returns the process exit code."""
    opened: list[Communicator] = []

    def body(world: World) -> int:
        torch.set_num_threads(config.threads or default_threads())
        comm = Communicator(config.backend, device=pick_device(config.device))
        opened.append(comm)
        world.known(comm.rank, comm.size, comm.world.Abort)
        return _run(config, comm)

    return run_rank(body, cleanup=lambda: [comm.close() for comm in opened])


def _run(config: RunConfig, comm: Communicator) -> int:
    task = get_task(config.task)
    rank0 = comm.rank == 0
    say = print if rank0 else (lambda *_a, **_k: None)
    threads = torch.get_num_threads()
    hostnames = comm.allgather_object(environment.hostname())

    def open_reporter() -> Reporter:
        if rank0:
            return make_reporter(
                config.master_url, config.run_id, config.token, config.metrics_file
            )
        return make_reporter(None, config.run_id, None, None)

    built = build_run(config, comm, task, lambda line: say(line, flush=True), open_reporter)
    trainer, reporter, device = built.trainer, built.trainer.reporter, comm.device
    trainer.predictions = open_sink(
        comm,
        reporter,
        metrics_file=config.metrics_file,
        master_url=config.master_url,
        dataset=built.dataset,
        features=built.config.get("features"),  # task 2's rows; the image tasks have none
    )
    workers = comm.size
    goal = trainer.goal

    identity = {
        "task": task.name,
        "model": config.model,
        "num_workers": workers,
        "batch_size": config.batch_size,
        "seed": config.seed,
        "dataset": built.dataset,
        "algorithm": trainer.algorithm,
        "algorithm_options": dict(trainer.algorithm_options),
        "implementation": config.implementation,
    }
    if config.checkpoint_dir:

        def save(trainer: Trainer) -> None:
            if trainer.comm.rank == 0:
                checkpoint.save(trainer, config.checkpoint_dir, identity)

        trainer.checkpoint = save

    if config.resume:
        state, problem = None, None
        if rank0:
            try:
                state = checkpoint.load(config.checkpoint_dir, identity)
            except WorkerError as exc:
                problem = str(exc)
        problem = comm.bcast_object(problem)
        if problem:
            raise WorkerError(problem)
        state = comm.bcast_object(state)
        checkpoint.restore(trainer, state)
        built.after_restore(trainer)
        say(
            f"resumed from {config.checkpoint_dir}: {trainer.progress.epoch} epochs done, "
            f"{trainer.progress.elapsed_before:.1f}s on the clock",
            flush=True,
        )

    say(
        f"{task.name}: model {config.model}, {built.data_line}, "
        f"{workers} worker(s), backend {comm.backend}, device {device}, {threads} thread(s)/rank, "
        f"batch {config.batch_size}/worker, peak lr {built.peak_lr:g}, "
        f"algorithm {describe(trainer.algorithm, trainer.algorithm_options)}, "
        f"implementation {config.implementation} ({trainer.allreduce.describe()}), "
        f"target {config.target} "
        f"({goal.describe()}), max {goal.max_epochs} epochs"
        + (f", time budget {config.time_budget:g}s" if config.time_budget else ""),
        flush=True,
    )

    try:
        progress = trainer.fit()
        elapsed = trainer.elapsed()
        totals = comm.allreduce_sums(
            [
                progress.time_data,
                progress.time_compute,
                progress.time_comm,
                progress.time_comm_total,
                progress.comm_bytes / max(progress.step, 1),
            ]
        )
        step_total = float(totals[:3].sum())
        # The mean over ranks of each rank's bytes per step (ranks of decentralized SGD on
        # a ring with 2 ranks, or of local SGD, send the same; the mean is the fair figure
        # should a topology ever give ranks different degrees).
        bytes_per_step = float(totals[4] / workers)
        full = trainer.full_allreduce_bytes() if workers > 1 else 0
        summary = training_summary(
            task=task.name,
            model=config.model,
            dataset=built.dataset,
            num_workers=workers,
            backend=comm.backend,
            device=str(device),
            target=config.target,
            outcome=outcome(progress, goal.accuracy),
            throughput=finite(trainer.throughput()),
            comm_share=float(totals[2] / step_total) if step_total > 0 else 0.0,
            comm_share_total=float(totals[3] / step_total) if step_total > 0 else 0.0,
            algorithm=trainer.algorithm,
            algorithm_options=dict(trainer.algorithm_options),
            implementation=config.implementation,
            comm_bytes_per_step=bytes_per_step,
            full_allreduce_bytes=full,
            elapsed=elapsed,
            seed=config.seed,
            versions=environment.versions(),
            hardware=environment.hardware(device, threads, hostnames),
            stop_reason=progress.stop_reason,
            run_id=config.run_id,
            dataset_note=built.note,
            **built.results(trainer),
            config={
                "batch_size": config.batch_size,
                "peak_lr": built.peak_lr,
                "max_epochs": config.max_epochs,
                "time_budget": config.time_budget,
                **built.config,
                **trainer.allreduce_config(),
                "threads": threads,
            },
        )
        if rank0:
            reporter.summary(summary)
            print(summary_table(summary), flush=True)
            if footer := built.footer(summary):
                print(footer, flush=True)
        # Off the clock, after its end; and after the summary, which a task-3 model's grade
        # repeats the run's evaluation from (the master refuses the model before it).
        export_final(trainer, trainer.predictions)
    finally:
        reporter.close()
    return 0
