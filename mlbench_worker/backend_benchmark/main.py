"""One rank of the backend benchmark: set up the backends, sweep, report.

Errors a user can fix are raised on every rank together and printed once by rank 0; anything
unexpected prints its traceback and aborts the MPI job, so no rank waits forever in a
collective for a partner that died (training/entry.py, the one wrapper of every rank).
"""

from __future__ import annotations

import argparse

import torch

from mlbench_worker.backend_benchmark import TASK, records
from mlbench_worker.backend_benchmark.collectives import (
    close_backends,
    default_backends,
    open_backends,
)
from mlbench_worker.backend_benchmark.sizes import label
from mlbench_worker.backend_benchmark.sweep import Plan, run_sweep
from mlbench_worker.training import environment
from mlbench_worker.training.entry import World, run_rank
from mlbench_worker.training.errors import WorkerError
from mlbench_worker.training.metric_sink import make_reporter
from mlbench_worker.training.run import default_threads, pick_device


def run_main(args: argparse.Namespace) -> int:
    """Entry point after option parsing; returns the process exit code."""
    from mpi4py import MPI

    mpi_world = MPI.COMM_WORLD
    backends: dict = {}

    def body(world: World) -> int:
        world.known(mpi_world.Get_rank(), mpi_world.Get_size(), mpi_world.Abort)
        torch.set_num_threads(args.threads or default_threads())
        if mpi_world.Get_size() < 2:
            raise WorkerError(
                f"{TASK} measures communication between workers: start it with at least 2 "
                "ranks (mpirun -n 2, or num_workers >= 2)"
            )
        device = pick_device(args.device)
        names = args.backends or default_backends(device)
        backends.update(open_backends(names, mpi_world, device, max(args.sizes)))
        plan = Plan(
            sizes=args.sizes,
            ops=args.ops,
            backends=names,
            warmup=args.warmup,
            repeats=args.repeats,
            min_repeats=args.min_repeats,
            size_time_cap=args.size_time_cap,
            time_budget=args.time_budget,
        )
        return _run(args, mpi_world, plan, backends, device)

    return run_rank(body, cleanup=lambda: close_backends(backends))


def _run(
    args: argparse.Namespace, world: object, plan: Plan, backends: dict, device: torch.device
) -> int:
    rank0 = world.Get_rank() == 0
    workers = world.Get_size()
    hostnames = world.allgather(environment.hostname())
    threads = torch.get_num_threads()
    if rank0:
        reporter = make_reporter(args.master_url, args.run_id, args.token, args.metrics_file)
        print(
            f"{TASK}: {', '.join(plan.ops)} on {', '.join(plan.backends)}, {workers} workers, "
            f"device {device}, {len(plan.sizes)} sizes {label(plan.sizes[0])}..."
            f"{label(plan.sizes[-1])}, warm-up {plan.warmup}, repeats {plan.repeats} "
            f"(at least {plan.min_repeats}, {plan.size_time_cap:g} s cap per size)"
            + (f", time budget {plan.time_budget:g}s" if plan.time_budget else ""),
            flush=True,
        )
    else:
        reporter = make_reporter(None, args.run_id, None, None)

    def on_row(row: dict, elapsed: float) -> None:
        if rank0:
            records.post_row(reporter, row, elapsed)

    try:
        outcome = run_sweep(plan, world, backends, on_row)
        if rank0:
            summary = records.summary_record(
                plan,
                outcome,
                workers=workers,
                device=str(device),
                threads=threads,
                versions=environment.versions(),
                hardware=environment.hardware(device, threads, hostnames),
                run_id=args.run_id,
            )
            reporter.summary(summary)
            print(records.table(summary), flush=True)
    finally:
        reporter.close()
    return 0
