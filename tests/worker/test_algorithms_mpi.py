"""The training algorithms (mlbench_worker/algorithms/) on real ranks, through the real Trainer.

This file is also the ranks' script (`python test_algorithms_mpi.py MODE ARGS...`; rank 0
prints RESULT): a small conv net with batch norm (two compressible convolutions, a 1x1
convolution too small to compress, a linear layer, vectors) trains a few steps per
algorithm and backend, and after every step the ranks compare what they hold.

- centralized algorithms: the replicas are bitwise equal after every step; error feedback
  adds up (what was sent plus what is kept equals the accumulated gradient); each step's
  bytes are the algorithm's formula, computed here from the parameter shapes;
- local SGD: replicas differ between averagings and are equal right after one;
- decentralized SGD: each rank talks only to its topology's neighbours, point to point
  (the only collective is the 20-byte scalar sum), and gossip alone shrinks the distance
  between replicas;
- a rank killed mid-step ends mpirun within 10 s, for every algorithm.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from pathlib import Path

import pytest
import torch

THIS = Path(__file__).resolve()
CENTRALIZED = [
    ("allreduce", {"precision": "fp32"}, True),
    ("allreduce", {"precision": "fp16"}, True),
    ("allreduce", {"precision": "bf16"}, False),
    ("allreduce", {"precision": "bf16"}, True),
    ("powersgd", {"rank": 2}, False),
    ("topk", {"density": 0.05}, False),
    ("signsgd", {}, False),
    ("signsgd", {"scale": "model", "compress": "gradient"}, False),
]
STEPS = 4


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3])
def test_centralized_algorithms_keep_replicas_identical(ranks):
    from .helpers import mpi_result, mpirun

    results = mpi_result(mpirun(ranks, [str(THIS), "centralized", "mpi", "gloo"], timeout=300))
    assert set(results) == {"mpi", "gloo"}
    for backend, cases in results.items():
        assert len(cases) == len(CENTRALIZED)
        for case, r in cases.items():
            where = (ranks, backend, case)
            assert r["steps"] == STEPS, where
            assert r["identical_after_every_step"], where
            assert r["bytes"] == [r["expected_bytes"]] * STEPS, where
            assert r["loss_finite"], where
            if "feedback_error" in r:  # sent + kept == accumulated, to float rounding
                assert r["feedback_error"] <= 1e-5 * max(r["accumulated_max"], 1.0), where
                assert r["kept_max"] > 0, where  # something was held back: it compresses


@pytest.mark.mpi
def test_local_sgd_averages_every_period_and_gossip_stays_with_neighbours():
    from .helpers import mpi_result, mpirun

    results = mpi_result(mpirun(4, [str(THIS), "local", "mpi", "gloo"], timeout=300))
    for backend, r in results.items():
        # period 2: different after steps 1 and 3, identical after steps 2 and 4.
        assert r["localsgd_identical"] == [False, True, False, True], backend
        assert r["localsgd_bytes"][1] == r["model_bytes"] and r["localsgd_bytes"][0] == 0
        # A ring of 4: rank r exchanges with r-1 and r+1 only, never with the rank opposite.
        for rank, peers in enumerate(r["decentralized_peers"]):
            assert peers == sorted({(rank - 1) % 4, (rank + 1) % 4}), (backend, rank, peers)
        assert r["decentralized_kinds"] == ["allreduce:0", "p2p"], backend
        assert r["decentralized_bytes"] == 2 * r["model_bytes"], backend
        assert not r["decentralized_identical"], backend  # replicas differ while training
        distances = r["gossip_distances"]  # gossip only: the spread shrinks every round
        assert all(b < a for a, b in zip(distances, distances[1:], strict=False)), distances
        assert distances[-1] < 0.2 * distances[0], distances
        assert r["evaluated_average"], backend


ALGORITHMS = ["allreduce", "powersgd", "topk", "signsgd", "localsgd", "decentralized"]


@pytest.mark.mpi
@pytest.mark.parametrize(
    "algorithm,backend",
    [(a, "mpi") for a in ALGORITHMS] + [("topk", "gloo"), ("decentralized", "gloo")],
)
def test_a_rank_killed_mid_step_ends_mpirun_quickly(algorithm, backend):
    from .helpers import mpirun

    proc = mpirun(2, [str(THIS), "kill", backend, algorithm], timeout=120)
    ended = time.time()
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "RESULT" not in proc.stdout, out[-3000:]  # the survivor never finished
    killed = [float(x.split()[-1]) for x in proc.stdout.splitlines() if x.startswith("KILLED ")]
    assert killed, out[-3000:]
    assert ended - killed[0] < 10, (ended - killed[0], out[-3000:])


# --- the ranks' side -----------------------------------------------------------------------
def _model() -> torch.nn.Module:
    torch.manual_seed(3)
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 2, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2, 10),
    )  # fmt: skip


def _trainer(comm, name: str, options: dict, overlap: bool = False):
    from mlbench_worker.data.loader import Batches, channel_stats
    from mlbench_worker.shared.algorithm_catalogue import check
    from mlbench_worker.tasks.cifar10.synthetic import generate
    from mlbench_worker.training.comm import broadcast_model
    from mlbench_worker.training.metric_sink import Reporter
    from mlbench_worker.training.trainer import Goal, Schedule, Trainer

    data = generate(4, 8 * STEPS * comm.size, 16)
    mean, std = channel_stats(data.train_x)
    model = _model()
    broadcast_model(model, comm)
    trainer = Trainer(
        model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4),
        Schedule(0.05, 0.05, 0, (), 1.0), Goal("light", 0.7, 1), comm,
        Batches(data.train_x, data.train_y, 8, mean, std),
        Batches(data.test_x, data.test_y, 8, mean, std, augment=False), Reporter(),
        seed=2, device=torch.device("cpu"), print_fn=lambda _m: None,
    )  # fmt: skip
    values, problems = check(name, options, comm.size)
    assert not problems, problems
    trainer.set_algorithm(name, values, overlap=overlap)
    assert trainer.allreduce.overlap == overlap
    return trainer


def _state(model: torch.nn.Module, buffers: bool = True) -> torch.Tensor:
    """Parameters and floating buffers (batch-norm statistics) as one vector. Synchronous
    algorithms keep only the parameters equal: each rank's statistics follow its own batches
    until an evaluation averages them, as they always have."""
    tensors = list(model.parameters())
    tensors += [b for b in model.buffers() if b.is_floating_point()] if buffers else []
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def _same_everywhere(comm, t: torch.Tensor) -> bool:
    everyone = comm.allgather_object(t)
    return all(torch.equal(everyone[0], x) for x in everyone)


def _expected_bytes(name: str, options: dict, model: torch.nn.Module) -> int:
    """Each algorithm's bytes per step, from the parameter shapes (the docstrings' formulas)."""
    params = list(model.parameters())
    d = sum(p.numel() for p in params)
    if name == "allreduce":
        return d * (4 if options["precision"] == "fp32" else 2)
    if name == "topk":
        return 8 * math.ceil(options["density"] * d)
    if name == "signsgd":  # a bit per entry, a scale per tensor (or one)
        return math.ceil(d / 8) + 4 * (len(params) if options["scale"] == "tensor" else 1)
    total = 0  # powersgd
    for p in params:
        n = p.shape[0]
        m = p.numel() // n
        r = min(options["rank"], n, m)
        small = p.dim() < 2 or r * (n + m) * options["min_compression_rate"] >= n * m
        total += p.numel() * 4 if small else r * (n + m) * 4
    return total


def _run_steps(trainer, after) -> None:  # noqa: ANN001
    """Train one epoch, calling `after(step)` right after each step's after_step."""
    exchange = trainer.allreduce
    original = exchange.after_step

    def hooked(step: int) -> None:
        original(step)
        after(step)

    exchange.after_step = hooked
    trainer.clock_start = time.perf_counter()
    trainer.train_one_epoch(0)


def centralized(backend: str) -> dict:
    from mlbench_worker.training.comm import Communicator

    comm = Communicator(backend)
    out = {
        f"{name} {options} overlap={overlap}": _centralized_case(comm, name, options, overlap)
        for name, options, overlap in CENTRALIZED
    }
    comm.close()
    return out


def _centralized_case(comm, name: str, options: dict, overlap: bool) -> dict:  # noqa: ANN001
    """STEPS steps of `name`: replicas compared after each, bytes, error feedback's sums."""
    trainer = _trainer(comm, name, options, overlap)
    exchange, grads = trainer.allreduce, trainer.grads
    exchange.keep_sent = True
    accumulated = torch.zeros_like(grads.grads)
    sent = torch.zeros_like(grads.grads)
    finish = exchange.finish

    def finish_and_record() -> float:
        # This rank's gradient as backward left it; top-k's memory holds lr-scaled steps.
        rate = trainer.optimizer.param_groups[0]["lr"] if name == "topk" else 1.0
        accumulated.add_(grads.grads, alpha=rate)
        hidden = finish()
        if exchange.last_sent is not None:
            sent.add_(exchange.last_sent)
        return hidden

    exchange.finish = finish_and_record
    identical, sizes = [], []

    def after(step: int) -> None:
        identical.append(_same_everywhere(comm, _state(trainer.model, False)))
        sizes.append(exchange.comm_bytes)

    _run_steps(trainer, after)
    case = {
        "steps": trainer.progress.step,
        "identical_after_every_step": all(identical) and len(identical) == STEPS,
        "bytes": sizes,
        "expected_bytes": _expected_bytes(name, trainer.algorithm_options, trainer.model)
        * (comm.size > 1),
        "loss_finite": bool(torch.isfinite(_state(trainer.model)).all()),
    }
    # The compressors of the gradient: sent + kept == accumulated (EF-SignSGD's default
    # compresses the optimizer's step instead: test_algorithms_reference.py checks it).
    if hasattr(exchange, "residual") and not getattr(exchange, "on_step", False):
        kept = exchange.residual()
        case["feedback_error"] = float((sent + kept - accumulated).abs().max())
        case["accumulated_max"] = float(accumulated.abs().max())
        case["kept_max"] = float(kept.abs().max())
    exchange.remove()
    return case


def local(backend: str) -> dict:
    from mlbench_worker.training.comm import Communicator

    comm = Communicator(backend)
    out: dict = {}
    trainer = _trainer(comm, "localsgd", {"period": 2})
    identical, sizes = [], []

    def after(step: int) -> None:
        identical.append(_same_everywhere(comm, _state(trainer.model)))
        sizes.append(trainer.allreduce.comm_bytes)

    _run_steps(trainer, after)
    out["localsgd_identical"], out["localsgd_bytes"] = identical, sizes
    out["model_bytes"] = _state(trainer.model).numel() * 4

    trainer = _trainer(comm, "decentralized", {"topology": "ring"})
    exchange = trainer.allreduce
    exchange.wire.record = True
    kinds, sent = set(), []

    def watch(step: int) -> None:
        kinds.update(f"{k}:{b}" if k == "allreduce" else k for k, b, _ in exchange.wire.calls)
        sent.append(exchange.comm_bytes)

    _run_steps(trainer, watch)
    out["decentralized_kinds"] = sorted(kinds)
    out["decentralized_bytes"] = sent[-1]
    out["decentralized_identical"] = _same_everywhere(comm, _state(trainer.model))
    peers = sorted({p for _, _, ps in exchange.wire.calls for p in ps})
    out["decentralized_peers"] = comm.allgather_object(peers)
    # Evaluation sees the average of the replicas, and each rank gets its own model back.
    own = _state(trainer.model).clone()
    with exchange.evaluation():
        inside = _state(trainer.model).clone()
    mean = torch.stack(comm.allgather_object(own)).mean(0)
    out["evaluated_average"] = bool(
        torch.allclose(inside, mean, atol=1e-6) and torch.equal(_state(trainer.model), own)
    )
    # Gossip alone (no gradient): the replicas' spread shrinks round after round.
    torch.manual_seed(50 + comm.rank)
    with torch.no_grad():
        for p in trainer.model.parameters():
            p.add_(torch.randn_like(p))
    distances = []
    for _ in range(6):
        everyone = torch.stack(comm.allgather_object(_state(trainer.model)))
        distances.append(float((everyone - everyone.mean(0)).norm()))
        exchange.begin()
        exchange.finish()
    out["gossip_distances"] = distances
    comm.close()
    return out


def kill(backend: str, algorithm: str) -> None:
    """Rank 1 dies by SIGKILL at step 3, after backward, while rank 0 is inside the step's
    exchange: mpirun must end the whole job."""
    from mlbench_worker.shared.algorithm_catalogue import ALGORITHMS
    from mlbench_worker.training.comm import Communicator

    comm = Communicator(backend)
    options = {"period": 1} if algorithm == "localsgd" else {}
    trainer = _trainer(comm, algorithm, {**ALGORITHMS[algorithm].defaults(), **options})
    exchange = trainer.allreduce
    finish = exchange.finish

    def die_or_finish() -> float:
        if comm.rank == 1 and trainer.progress.step == 2:
            print(f"KILLED {time.time()}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return finish()

    exchange.finish = die_or_finish
    trainer.clock_start = time.perf_counter()
    trainer.train_one_epoch(0)
    if comm.rank == 0:
        print("RESULT survived", flush=True)


def main() -> None:
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "kill":
        kill(*args)
        return
    run = {"centralized": centralized, "local": local}[mode]
    results = {backend: run(backend) for backend in args}
    from mpi4py import MPI

    if MPI.COMM_WORLD.Get_rank() == 0:
        print("RESULT " + json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
