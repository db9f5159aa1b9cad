"""Data for the dashboard tests: runs with training metrics and logs, worker pods with
resource metrics. Rows are written with the ORM (what the master itself stores); the live
update tests post through the REST API instead."""

from __future__ import annotations

import datetime as dt
import math

from django.utils import timezone

from mlbench_worker.shared import catalogue


def training_points(
    run_id: int,
    start: dt.datetime,
    epochs: range,
    *,
    speed: float = 1.0,
    startup: float = 0.0,
    intervals: int = 1,
    throughput_metric: str = "images_per_sec",
):
    """Metric dicts (the worker's shape) for `epochs`, as a run of relative `speed` posts them.

    Each epoch takes 30 s / speed on the benchmark clock, which starts `startup` seconds
    after `start` (mpirun and data start-up). Training values and the progress series
    (`epoch` as a fraction, `elapsed`) come `intervals` times per epoch; validation values
    at each epoch's end. Throughput is posted as `throughput_metric`, the name the task's
    worker uses (task 1a: images_per_sec, task 2: samples_per_sec)."""
    points = []
    for e in epochs:
        for k in range(1, intervals + 1):
            done = e + k / intervals  # epochs completed, fractional mid-epoch
            elapsed = 30.0 * done / speed
            meta = {"epoch": done, "step": round(100 * done), "elapsed": elapsed}
            date = start + dt.timedelta(seconds=startup + elapsed)
            values = {
                "train_loss": 2.3 * math.exp(-0.35 * done) + 0.1,
                "train_accuracy": min(0.97, 0.25 + 0.09 * done),
                "learning_rate": 0.1 * speed * (0.1 if e >= 8 else 1.0),
                throughput_metric: 600.0 * speed,
                "time_data": 0.01,
                "time_compute": 0.2 / speed,
                "time_comm": 0.02 * speed,
                "epoch": done,
                "elapsed": elapsed,
            }
            if k == intervals:
                values["val_loss"] = 2.2 * math.exp(-0.3 * done) + 0.2
                values["val_accuracy"] = min(0.93, 0.2 + 0.08 * done)
            for name, value in values.items():
                points.append(
                    {
                        "run_id": run_id,
                        "name": name,
                        "value": value,
                        "date": date.isoformat(),
                        "cumulative": False,
                        "metadata": meta,
                        "uid": f"r{run_id}-{name}-{e}-{k}",
                    }
                )
    return points


def store_points(points) -> None:
    from mlbench_master.api.models import Metric

    Metric.objects.bulk_create(
        Metric(
            run_id=p.get("run_id"),
            pod_name=p.get("pod_name"),
            name=p["name"],
            value=p["value"],
            date=dt.datetime.fromisoformat(p["date"]),
            cumulative=p.get("cumulative", False),
            metadata=p.get("metadata", {}),
            uid=p.get("uid"),
        )
        for p in points
    )


def make_run(
    name: str,
    workers: int,
    *,
    state: str = "FINISHED",
    epochs: int = 10,
    dataset_used: str | None = None,
    speed: float | None = None,
    target: str = "light",
    task: str = "resnet20-cifar10",
    backend: str = "mpi",
    num_cpus: float = 1.0,
    ago: float = 3600.0,
    **fields,
):
    """A run as the master stores it after its workers reported, with metrics and logs.

    Realistic on purpose: created, then started 5 s later (queued), then finished when its
    last epoch ended, all `ago` seconds back; the summary's target accuracy is the one its
    target asks for in the catalogue, and the time to target is when the seeded validation
    accuracy (0.2 + 0.08 per epoch) first reaches it. Data set (unless given), throughput
    metric and data sizes are those of the task: a task-2 run posts samples_per_sec and
    reports train_samples, as its worker does. A task the catalogue does not know (a run of
    another version) is seeded like task 1a."""
    from mlbench_master.api.models import LogChunk, Run

    info = catalogue.TASKS.get(task, catalogue.get(catalogue.DEFAULT_TASK))
    dataset_used = dataset_used or info.dataset
    counted = info.throughput_unit.removesuffix("/s")  # "images" or "samples"
    speed = speed if speed is not None else 0.9 * workers if workers > 1 else 1.0
    created = timezone.now() - dt.timedelta(seconds=ago)
    start = created + dt.timedelta(seconds=5)
    goal = info.goal(target).value
    epochs_to_goal = math.ceil(round((goal - 0.2) / 0.08, 6))
    reached = epochs_to_goal <= epochs
    best = min(0.93, 0.2 + 0.08 * epochs)
    summary = {}
    if state == "FINISHED":
        summary = {
            "task": task, "model": task.split("-")[0], "dataset": dataset_used,
            "num_workers": workers, "backend": backend, "device": "cpu", "target": target,
            "target_accuracy": goal, "reached": reached,
            "time_to_target": 30.0 * epochs_to_goal / speed if reached else None,
            "final_val_accuracy": best, "best_val_accuracy": best, "epochs": epochs,
            info.throughput_metric: 600.0 * speed, "comm_share": 0.08,
            "elapsed": 30.0 * epochs / speed, "seed": 42,
            "versions": {"python": "3.11", "torch": "2.13.0", "mpi": "Open MPI 5"},
            "hardware": {"cpu": "test"},
            "config": {f"train_{counted}": 50000, f"test_{counted}": 10000, "batch_size": 128},
        }  # fmt: skip
    run = Run.objects.create(
        name=name,
        created_at=created,
        num_workers=workers,
        num_cpus=num_cpus,
        task=task,
        backend=backend,
        target=target,
        state=state,
        started_at=start,
        finished_at=start + dt.timedelta(seconds=30 * epochs / speed)
        if state == "FINISHED"
        else None,
        dataset_used=dataset_used if state == "FINISHED" else "",
        summary=summary,
        manifest={"config": {"num_workers": workers}, "git_revision": "abc123", "seed": 42},
        **fields,
    )
    store_points(
        training_points(
            run.pk, start, range(epochs), speed=speed, throughput_metric=info.throughput_metric
        )
    )
    LogChunk.objects.bulk_create(
        LogChunk(run=run, rank=r, stream=s, seq=i + 1, text=f"rank {r} {s}: epoch {i} done\n")
        for i, (r, s) in enumerate(
            [(r, s) for r in range(workers) for s in ("stdout", "stderr")] * 3
        )
    )
    return run


def make_pods(names, minutes: int = 10):
    """Worker pods with a reading every 30 s over the last `minutes`."""
    from mlbench_master.api.models import Pod

    now = timezone.now()
    points = []
    for i, name in enumerate(names):
        Pod.objects.create(
            name=name, phase="Running", ip=f"127.0.0.{i + 1}", node="localhost",
            labels={"app": "mlbench", "component": "worker"},
        )  # fmt: skip
        for k in range(minutes * 2):
            date = (now - dt.timedelta(seconds=30 * (minutes * 2 - k))).isoformat()
            for metric, value, cumulative in (
                ("cpu_cores", 0.5 + 0.4 * math.sin(k / 3 + i), False),
                ("memory_bytes", 300e6 + 5e6 * k, False),
                ("net_rx_bytes", 1e6 * k * k, True),
                ("net_tx_bytes", 0.7e6 * k * k, True),
            ):
                points.append(
                    {"pod_name": name, "name": metric, "value": value, "date": date,
                     "cumulative": cumulative, "metadata": {}}
                )  # fmt: skip
    store_points(points)
