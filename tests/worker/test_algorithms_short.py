"""The short form of issue 36's measurement, in `make test`: every algorithm, at its
catalogue defaults (its paper's recipe), trains on task 1a's generated set through the
real Trainer on 2 ranks and reaches task 1a's light target (70 % validation accuracy).

A small conv net with batch norm (keeping a 4x4 map: the classes are spatial patterns)
stands in for ResNet-20, which needs minutes per
algorithm on this machine's 2 cores to reach 70 %: the long form, ResNet-20 to 80 % with
epochs and time beside allreduce's, is tests/benchmarks/bench_algorithms.py (make bench).
This file is also the ranks' script (`python test_algorithms_short.py`; rank 0 prints
RESULT).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
import torch

THIS = Path(__file__).resolve()
MAX_EPOCHS = 8


@pytest.mark.mpi
def test_every_algorithm_reaches_the_light_target_on_the_generated_set():
    from mlbench_worker.shared.algorithm_catalogue import GENERAL_ALGORITHMS as ALGORITHMS

    from .helpers import mpi_result, mpirun

    results = mpi_result(mpirun(2, [str(THIS)], timeout=600))
    assert set(results) == set(ALGORITHMS)
    for name, r in results.items():
        assert r["reached"], (name, r)
        assert r["accuracy"] >= 0.70, (name, r)


def _model() -> torch.nn.Module:
    torch.manual_seed(5)
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(256, 10),
    )  # fmt: skip


def run(comm, name: str, data) -> dict:  # noqa: ANN001
    from mlbench_worker.data.loader import Batches, channel_stats
    from mlbench_worker.shared.algorithm_catalogue import check
    from mlbench_worker.shared.catalogue import get
    from mlbench_worker.training.comm import broadcast_model
    from mlbench_worker.training.metric_sink import Reporter
    from mlbench_worker.training.trainer import Goal, Schedule, Trainer

    light = get("resnet20-cifar10").goals["light"].value
    mean, std = channel_stats(data.train_x)
    model = _model()
    broadcast_model(model, comm)
    lr = 0.1 * comm.size
    trainer = Trainer(
        model, torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=1e-4),
        Schedule(lr, lr, 0, (), 1.0), Goal("light", light, MAX_EPOCHS), comm,
        Batches(data.train_x, data.train_y, 32, mean, std),
        Batches(data.test_x, data.test_y, 64, mean, std, augment=False), Reporter(),
        seed=7, device=torch.device("cpu"), print_fn=lambda _m: None,
    )  # fmt: skip
    values, problems = check(name, {}, comm.size)
    assert not problems, problems
    trainer.set_algorithm(name, values)
    started = time.perf_counter()
    progress = trainer.fit()
    return {
        "reached": progress.time_to_target is not None,
        "accuracy": progress.best_val_accuracy,
        "curve": [round(h.get("val_accuracy", 0), 3) for h in progress.history],
        "epochs": progress.epochs_done,
        "seconds": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    from mlbench_worker.shared.algorithm_catalogue import GENERAL_ALGORITHMS as ALGORITHMS
    from mlbench_worker.tasks.cifar10.synthetic import generate
    from mlbench_worker.training.comm import Communicator

    torch.set_num_threads(1)
    comm = Communicator("mpi")
    data = generate(7, 1024, 256)
    results = {name: run(comm, name, data) for name in ALGORITHMS}
    comm.close()
    if comm.rank == 0:
        print("RESULT " + json.dumps(results), flush=True)


if __name__ == "__main__":
    sys.exit(main())
