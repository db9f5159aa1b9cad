"""One reference (or torch-ddp) run on one rank: the reference loop's parts of the rank body.

The steps every implementation's rank takes (reporter, set-up, predictions, training, the
record, the final model) are rank_body.py's; `ReferenceRank` supplies what the torch
trainers do their own way. Every task is set up the same way (build.build_run: the task
names its own set-up module, e.g. mlbench_worker/tasks/cifar10/setup.py for task 1a);
torch-ddp is this loop with DistributedDataParallel's all-reduce (algorithms/ddp.py),
chosen in build.exchange_gradients. Checkpoints (written after every epoch, resumed with
--resume) are this implementation's alone.

How the rank ends (an error printed once, or a traceback and the whole job aborted) is
entry.py's, the same for every implementation.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from mlbench_worker.shared.algorithm_catalogue import describe
from mlbench_worker.tasks import get_task
from mlbench_worker.training import checkpoint, environment, rank_body
from mlbench_worker.training.build import Built, build_run
from mlbench_worker.training.comm import Communicator, local_rank
from mlbench_worker.training.config import RunConfig
from mlbench_worker.training.entry import World, run_rank
from mlbench_worker.training.environment import default_threads  # torch-free there, shared
from mlbench_worker.training.errors import WorkerError
from mlbench_worker.training.metric_sink import Reporter
from mlbench_worker.training.progress import Progress
from mlbench_worker.training.rank_body import Say, Setup
from mlbench_worker.training.run_record import RunFacts, comm_shares
from mlbench_worker.training.torch_export import export_final
from mlbench_worker.training.trainer import Trainer

__all__ = ["ReferenceRank", "default_threads", "pick_device", "run_main"]


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
        return rank_body.run(config, ReferenceRank(config, comm))

    return run_rank(body, cleanup=lambda: [comm.close() for comm in opened])


class ReferenceRank:
    """The reference loop's and torch-ddp's parts of a rank's run (rank_body.Implementation)."""

    def __init__(self, config: RunConfig, comm: Communicator) -> None:
        self.config, self.comm = config, comm
        self.rank = comm.rank
        self.collectives = comm
        self.task = get_task(config.task)
        self.threads = torch.get_num_threads()
        self.hostnames = comm.allgather_object(environment.hostname())
        self.built: Built | None = None

    @property
    def trainer(self) -> Trainer:
        assert self.built is not None, "build() first"
        return self.built.trainer

    def build(self, say: Say, open_reporter: Callable[[], Reporter]) -> Setup:
        self.built = build_run(self.config, self.comm, self.task, say, open_reporter)
        # Task 2's rows have features (the predictions format's); the image tasks have none.
        return Setup(self.trainer, self.built.dataset, self.built.config.get("features"))

    def before_training(self, say: Say) -> None:
        """Checkpoints after every epoch (--checkpoint-dir), and --resume's."""
        config, comm, trainer = self.config, self.comm, self.trainer
        assert self.built is not None
        identity = checkpoint.identity_of(config, comm.size, self.built.dataset)
        if config.checkpoint_dir:
            folder = config.checkpoint_dir

            def save(trainer: Trainer) -> None:
                if trainer.comm.rank == 0:
                    checkpoint.save(trainer, folder, identity)

            trainer.checkpoint = save
        if not config.resume:
            return
        state, problem = None, None
        if self.rank == 0:
            try:
                state = checkpoint.load(config.checkpoint_dir, identity)
            except WorkerError as exc:
                problem = str(exc)
        problem = comm.bcast_object(problem)
        if problem:
            raise WorkerError(problem)
        state = comm.bcast_object(state)
        checkpoint.restore(trainer, state)
        self.built.after_restore(trainer)
        say(
            f"resumed from {config.checkpoint_dir}: {trainer.progress.epoch} epochs done, "
            f"{trainer.progress.elapsed_before:.1f}s on the clock"
        )

    def headline(self) -> str:
        config, trainer, built = self.config, self.trainer, self.built
        assert built is not None
        goal = trainer.goal
        return (
            f"{self.task.name}: model {config.model}, {built.data_line}, "
            f"{self.comm.size} worker(s), backend {self.comm.backend}, device {self.comm.device}, "
            f"{self.threads} thread(s)/rank, "
            f"batch {config.batch_size}/worker, peak lr {built.peak_lr:g}, "
            f"algorithm {describe(trainer.algorithm, trainer.algorithm_options)}, "
            f"implementation {config.implementation} ({trainer.allreduce.describe()}), "
            f"target {config.target} "
            f"({goal.describe()}), max {goal.max_epochs} epochs"
            + (f", time budget {config.time_budget:g}s" if config.time_budget else "")
        )

    def facts(self, progress: Progress) -> RunFacts:
        trainer, comm, built = self.trainer, self.comm, self.built
        assert built is not None
        workers = comm.size
        totals = comm.allreduce_sums(
            [
                progress.time_data,
                progress.time_compute,
                progress.time_comm,
                progress.time_comm_total,
                progress.comm_bytes / max(progress.step, 1),
                progress.comm_bytes_at_target or 0.0,
            ]
        )
        share, share_total = comm_shares(*totals[:4])
        return RunFacts(
            dataset=built.dataset,
            dataset_note=built.note,
            num_workers=workers,
            backend=comm.backend,
            device=str(comm.device),
            threads=self.threads,
            peak_lr=built.peak_lr,
            comm_share=share,
            comm_share_total=share_total,
            # The mean over ranks of each rank's bytes per step (ranks of decentralized SGD
            # on a ring with 2 ranks, or of local SGD, send the same; the mean is the fair
            # figure should a topology ever give ranks different degrees).
            comm_bytes_per_step=float(totals[4] / workers),
            comm_bytes_to_target=(
                float(totals[5] / workers) if progress.time_to_target is not None else None
            ),
            full_allreduce_bytes=trainer.full_allreduce_bytes() if workers > 1 else 0,
            versions=environment.versions(),
            hardware=environment.hardware(comm.device, self.threads, self.hostnames),
            config={**built.config, **trainer.allreduce_config()},
            results=built.results(trainer),
            # An outside algorithm as it ran: its declared NAME and completed options.
            algorithm=trainer.algorithm if trainer.outside else None,
            algorithm_options=trainer.algorithm_options if trainer.outside else None,
        )

    def footer(self, summary: dict) -> str:
        assert self.built is not None
        return self.built.footer(summary)

    def export(self) -> None:
        export_final(self.trainer, self.trainer.predictions)
