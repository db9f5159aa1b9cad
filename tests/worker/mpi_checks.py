"""Run under `mpirun -n 2` by test_mpi.py: checks that need real ranks; rank 0 prints RESULT."""

from __future__ import annotations

import copy
import json
import sys

import numpy as np
import torch
import torch.nn.functional as F

from mlbench_worker.data.loader import Batches, channel_stats
from mlbench_worker.models import build_model
from mlbench_worker.tasks.cifar10.synthetic import generate
from mlbench_worker.training.comm import Communicator, FlatGradients, broadcast_model
from mlbench_worker.training.metric_sink import Reporter
from mlbench_worker.training.trainer import Goal, Schedule, Trainer


def flat_params(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def flat_buffers(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([b.detach().reshape(-1).double() for b in model.buffers()])


def check(backend: str) -> dict:
    comm = Communicator(backend)
    out: dict = {}
    torch.manual_seed(1000 + comm.rank)  # different on purpose: the broadcast must fix it
    model = build_model("resnet20")
    broadcast_model(model, comm)
    everyone = comm.allgather_object(flat_params(model))
    out["identical_after_broadcast"] = all(torch.equal(everyone[0], p) for p in everyone)

    # All-reduced gradient == single-process gradient of the two ranks' batches together.
    # Eval mode: batch norm uses its running statistics, so samples do not interact.
    data = generate(11, 64, 8)
    x_all = (torch.from_numpy(data.train_x[:32]).float() - 128) / 64
    y_all = torch.from_numpy(data.train_y[:32])
    reference = copy.deepcopy(model)
    model.eval()
    grads = FlatGradients(list(model.parameters()), extra=4)
    grads.zero_()
    mine = slice(16 * comm.rank, 16 * (comm.rank + 1))
    F.cross_entropy(model(x_all[mine]), y_all[mine]).backward()
    grads.allreduce_average_(comm)
    if comm.rank == 0:
        reference.eval()
        F.cross_entropy(reference(x_all), y_all).backward()
        ref = torch.cat([p.grad.reshape(-1) for p in reference.parameters()])
        got = grads.grads
        out["grad_max_abs_diff"] = float((got - ref).abs().max())
        out["grad_max_abs"] = float(ref.abs().max())
        out["grad_close"] = bool(torch.allclose(got, ref, rtol=1e-4, atol=1e-6))
    out["grads_are_views"] = grads.intact()
    # The trainer's way: loss scaled by 1/K before backward, then a plain sum.
    grads.zero_()
    (F.cross_entropy(model(x_all[mine]), y_all[mine]) / comm.size).backward()
    grads.allreduce_average_(comm, prescaled=True)
    if comm.rank == 0:
        out["prescaled_close"] = bool(torch.allclose(grads.grads, ref, rtol=1e-4, atol=1e-6))

    # Several real training steps: parameters must stay bitwise identical on every rank.
    model2 = build_model("resnet20")
    broadcast_model(model2, comm)
    tr = generate(12, 256, 64)
    mean, std = channel_stats(tr.train_x)
    trainer = Trainer(
        model2,
        torch.optim.SGD(model2.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4),
        Schedule(0.05, 0.1, 2, (3,), 0.1),
        Goal("light", 0.7, max_epochs=1),
        comm,
        Batches(tr.train_x, tr.train_y, 32, mean, std),
        Batches(tr.test_x, tr.test_y, 32, mean, std, augment=False),
        Reporter(),
        seed=5,
        device=torch.device("cpu"),
        log_every=2,
        print_fn=lambda _m: None,
    )
    trainer.clock_start = 0.0
    trainer.train_one_epoch(0)
    out["steps"] = trainer.progress.step
    everyone = comm.allgather_object(flat_params(model2))
    out["params_identical_after_steps"] = all(torch.equal(everyone[0], p) for p in everyone)
    out["params_moved"] = not torch.equal(everyone[0], flat_params(build_model("resnet20")))
    loss, acc = trainer.evaluate()
    everyone = comm.allgather_object(flat_buffers(model2))
    out["buffers_identical_after_eval"] = all(torch.equal(everyone[0], b) for b in everyone)
    out["val_identical"] = len({round(v, 9) for v in comm.allgather_object(acc)}) == 1
    out["images"] = trainer.progress.images
    comm.close()
    return out


def main() -> None:
    results = {backend: check(backend) for backend in sys.argv[1:] or ["mpi"]}
    from mpi4py import MPI

    if MPI.COMM_WORLD.Get_rank() == 0:
        print("RESULT " + json.dumps(results, default=lambda o: np.asarray(o).tolist()), flush=True)


if __name__ == "__main__":
    main()
