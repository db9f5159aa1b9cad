"""The bucketed all-reduce overlapped with backward (exchange.BucketedAllreduce).

Unit checks of the bucket layout and of the trainer's switch run in this process. The rest
runs under real mpirun: this file is also the ranks' script (`python test_buckets.py MODE
BACKEND...`, rank 0 prints RESULT), comparing bucketed against flat on the same ranks, and
killing a rank while a bucket is in flight.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
import torch

from mlbench_worker.algorithms.allreduce_exchange import (
    DEFAULT_BUCKET_MB,
    MIN_BUCKETS,
    Bucket,
    default_bucket_bytes,
    plan_buckets,
)
from mlbench_worker.training.comm import FlatGradients
from mlbench_worker.training.errors import WorkerError

THIS = Path(__file__).resolve()


# --- layout --------------------------------------------------------------------------------
def _tiles(buckets: list[Bucket], total: int) -> bool:
    """Buckets cover 0..total exactly once, the last one starting at 0, in descending order."""
    edges = [(b.start, b.stop) for b in reversed(buckets)]
    return (
        edges[0][0] == 0
        and edges[-1][1] == total
        and all(a[1] == b[0] for a, b in zip(edges, edges[1:], strict=False))
    )


def test_buckets_tile_the_buffer_in_backward_order():
    numels = [10, 3, 40, 5, 5, 20]
    buckets = plan_buckets(numels, bucket_bytes=4 * 25, head=5)
    assert _tiles(buckets, 5 + sum(numels))
    # Last parameter first; each closed bucket holds >= 25 elements, parameters never split.
    assert [b.params for b in buckets] == [(5, 4), (3, 2), (1, 0)]
    assert [(b.start, b.stop) for b in buckets] == [(63, 88), (18, 63), (0, 18)]
    assert buckets[-1].start == 0  # the scalar slots (head) go with the first parameters
    assert sorted(i for b in buckets for i in b.params) == list(range(len(numels)))


def test_a_parameter_larger_than_the_bucket_is_a_bucket_by_itself():
    buckets = plan_buckets([4, 1000, 4], bucket_bytes=8)
    assert [b.params for b in buckets] == [(2,), (1,), (0,)]
    assert [b.nbytes for b in buckets] == [16, 4000, 16]  # the big one whole, never split
    one = plan_buckets([4, 1000, 4], bucket_bytes=10**9, head=3)
    assert len(one) == 1 and (one[0].start, one[0].stop) == (0, 1011)


def test_default_bucket_size_gives_small_models_several_buckets():
    from mlbench_worker.models import build_model

    numels = [p.numel() for p in build_model("resnet20").parameters()]
    total = 4 * sum(numels)
    assert default_bucket_bytes(total) == -(-total // MIN_BUCKETS)  # 1.1 MB / 8
    buckets = plan_buckets(numels, default_bucket_bytes(total), head=5)
    assert len(buckets) == MIN_BUCKETS and _tiles(buckets, 5 + sum(numels))
    # A big model gets buckets of the fixed size.
    assert default_bucket_bytes(10**9) == int(DEFAULT_BUCKET_MB * 2**20)


def test_bad_bucket_plans_are_refused():
    with pytest.raises(WorkerError, match="bucket size must be positive, got 0"):
        plan_buckets([3], 0)
    with pytest.raises(WorkerError, match="no trainable parameter"):
        plan_buckets([], 100)


def test_flat_gradients_keep_the_scalar_slots_before_the_gradients():
    params = [torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2, 2))]
    grads = FlatGradients(params, extra=5)
    assert grads.offsets == [5, 8] and grads.buffer.numel() == 12
    grads.extra[:] = 7
    assert float(grads.grads.sum()) == 0.0 and grads.extra.data_ptr() == grads.buffer.data_ptr()


# --- the trainer's switch (one rank: MPI as a singleton) -----------------------------------
def _trainer(cls=None, **kwargs):
    from mlbench_worker.data.loader import Batches, channel_stats
    from mlbench_worker.models import build_model
    from mlbench_worker.tasks.cifar10.synthetic import generate
    from mlbench_worker.training.comm import Communicator
    from mlbench_worker.training.metric_sink import Reporter
    from mlbench_worker.training.trainer import Goal, Schedule, Trainer

    data = generate(3, 64, 16)
    mean, std = channel_stats(data.train_x)
    model = build_model("resnet20")
    return (cls or Trainer)(
        model, torch.optim.SGD(model.parameters(), lr=0.1), Schedule(0.1, 0.1, 0, (), 1.0),
        Goal("light", 0.7, 1), Communicator("mpi"),
        Batches(data.train_x, data.train_y, 16, mean, std),
        Batches(data.test_x, data.test_y, 16, mean, std, augment=False),
        Reporter(), seed=0, device=torch.device("cpu"), print_fn=lambda _m: None, **kwargs,
    )  # fmt: skip


def test_switch_errors_name_the_options():
    trainer = _trainer()
    assert trainer.allreduce_config() == {"overlap": False, "bucket_mb": None, "buckets": 1}
    with pytest.raises(WorkerError, match="--bucket-mb .* cannot be combined with --no-overlap"):
        trainer.set_overlap(False, 1.0)
    for bad in (0.0, -2.0, float("nan"), float("inf")):
        with pytest.raises(WorkerError, match="--bucket-mb must be a positive number of MB"):
            trainer.set_overlap(True, bad)
    trainer.set_overlap(True, 0.5)  # one rank: nothing to overlap, flat without complaint
    assert not trainer.allreduce.overlap


def test_task2_trainer_stays_flat_and_refuses_a_bucket_size():
    from mlbench_worker.tasks.epsilon.train import LinearTrainer

    class Probe(LinearTrainer):  # only the switch is under test: skip the GLM set-up
        def __init__(self, *args: object, **kwargs: object) -> None:
            from mlbench_worker.training.trainer import Trainer

            Trainer.__init__(self, *args, **kwargs)  # type: ignore[arg-type]

        def epoch_indices(self, epoch: int):  # noqa: ANN201
            return list(range(64))

    trainer = _trainer(Probe)
    with pytest.raises(WorkerError, match="--bucket-mb does not apply to .*no backward pass"):
        trainer.set_overlap(True, 1.0)
    trainer.set_overlap(True)
    assert not trainer.allreduce.overlap


def test_worker_option_errors():
    from .helpers import run_worker

    both = run_worker(["resnet20-cifar10", "--dataset", "synthetic", "--train-images", "64",
                       "--test-images", "32", "--no-overlap", "--bucket-mb", "1"])  # fmt: skip
    assert both.returncode != 0 and "cannot be combined with --no-overlap" in both.stderr
    assert "Traceback" not in both.stderr
    bad = run_worker(["resnet20-cifar10", "--bucket-mb", "-1"])
    assert bad.returncode == 2 and "--bucket-mb: must be a positive number" in bad.stderr


# --- under mpirun ----------------------------------------------------------------------------


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3])
def test_bucketed_and_flat_give_the_same_gradients(ranks):
    from .helpers import mpi_result, mpirun

    results = mpi_result(mpirun(ranks, [str(THIS), "same", "mpi", "gloo"], timeout=300))
    for backend, r in results.items():
        # Every rank ends with the same values, in every mode (replicas cannot drift).
        assert r["ranks_agree"], (backend, r)
        assert r["unused_parameter_bucket_sent"], backend
        assert r["second_backward_refused"], backend
        assert r["hidden_nonnegative"], backend
        for case, c in r["cases"].items():
            assert c["max_abs_diff"] <= 1e-6 * max(c["max_abs"], 1.0), (backend, case, c)
            # 2 ranks: one addition per element, the same bits whatever the chunking. 3 ranks:
            # Open MPI sums in the same order for any message size (measured); gloo's ring
            # starts each element's sum on a rank that depends on the chunk boundaries, so
            # its last bits may differ.
            if ranks == 2 or backend == "mpi":
                assert c["bitwise"], (backend, case, c)
        # Several optimizer steps through the real Trainer: flat and overlapped runs agree.
        assert r["trainer_steps"] == 3, backend
        if ranks == 2 or backend == "mpi":
            assert r["trainer_params_bitwise"], backend
        else:  # last-bit differences, grown by 3 steps of momentum SGD at lr 0.1
            assert r["trainer_params_max_diff"] <= 1e-3, backend


@pytest.mark.mpi
@pytest.mark.parametrize("backend", ["mpi", "gloo"])
def test_a_rank_killed_mid_bucket_fails_the_run(backend):
    from .helpers import mpirun

    proc = mpirun(2, [str(THIS), "kill", backend], timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "RESULT" not in proc.stdout  # the survivor never finished the step
    assert "KILLING rank 1 with a bucket in flight" in proc.stdout, out[-3000:]
    pids = [int(line.split()[-1]) for line in proc.stdout.splitlines() if line.startswith("PID ")]
    assert len(pids) == 2, out[-3000:]
    for pid in pids:  # mpirun returned: no rank is left behind, waiting in a collective
        assert not _alive(pid), (pid, out[-3000:])


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


# --- the ranks' side -----------------------------------------------------------------------
def _model(channels_last: bool = False, unused: bool = False) -> torch.nn.Module:
    from mlbench_worker.models import build_model

    torch.manual_seed(7)
    model = build_model("resnet20")
    if unused:  # a parameter no forward uses: its bucket never completes during backward
        model.unused = torch.nn.Linear(3, 3)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model


def _batch(rank: int, n: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randn(n, 3, 32, 32, generator=g), torch.randint(0, 10, (n,), generator=g)


def _step(model, grads, allreduce, comm, x, y) -> tuple[torch.Tensor, float]:
    """One gradient computation summed by `allreduce`, the scalar slots set after backward."""
    import torch.nn.functional as F

    allreduce.begin()
    (F.cross_entropy(model(x), y) / comm.size).backward()
    grads.extra[:] = torch.arange(grads.extra.numel(), dtype=torch.float32) + comm.rank
    hidden = allreduce.finish()
    return grads.buffer.clone(), hidden


def same(backend: str) -> dict:
    from mlbench_worker.algorithms.allreduce_exchange import BucketedAllreduce, FlatAllreduce
    from mlbench_worker.training.comm import Communicator

    comm = Communicator(backend)
    out: dict = {"cases": {}}
    agree, hidden_ok = True, True
    x, y = _batch(comm.rank)
    for case, bucket_bytes, channels_last in [
        ("default buckets", None, False),
        ("one parameter per bucket", 1, False),
        ("one bucket", 10**9, False),
        ("channels_last", None, True),
    ]:
        model = _model(channels_last)
        grads = FlatGradients(list(model.parameters()), extra=5)
        flat, _ = _step(model, grads, FlatAllreduce(grads, comm), comm, x, y)
        bucketed = BucketedAllreduce(grads, comm, bucket_bytes)
        got, hidden = _step(model, grads, bucketed, comm, x, y)
        bucketed.remove()
        hidden_ok &= hidden >= 0
        everyone = comm.allgather_object(got)
        agree &= all(torch.equal(everyone[0], g) for g in everyone)
        out["cases"][case] = {
            "buckets": len(bucketed.buckets),
            "bitwise": bool(torch.equal(flat, got)),
            "max_abs_diff": float((flat - got).abs().max()),
            "max_abs": float(flat.abs().max()),
        }
    out["ranks_agree"] = bool(agree)
    out["hidden_nonnegative"] = bool(hidden_ok)

    # A parameter without gradient: its bucket is sent by finish(), zeros summed like flat.
    model = _model(unused=True)
    grads = FlatGradients(list(model.parameters()), extra=5)
    flat, _ = _step(model, grads, FlatAllreduce(grads, comm), comm, x, y)
    bucketed = BucketedAllreduce(grads, comm, 4 * 1000)
    got, _ = _step(model, grads, bucketed, comm, x, y)
    out["unused_parameter_bucket_sent"] = bool(torch.allclose(flat, got, rtol=0, atol=1e-6))

    # Two backwards in one step would write into a bucket already being summed: refused.
    # (Above, the unused parameter held back every bucket, so two backwards would be fine.)
    bucketed.remove()
    model = _model()
    grads = FlatGradients(list(model.parameters()), extra=5)
    bucketed = BucketedAllreduce(grads, comm)
    bucketed.begin()
    import torch.nn.functional as F

    F.cross_entropy(model(x), y).backward()
    try:
        F.cross_entropy(model(x), y).backward()
        out["second_backward_refused"] = False
    except Exception as exc:  # autograd may wrap what a hook raised
        out["second_backward_refused"] = "--no-overlap" in str(exc)
    bucketed.finish()  # every rank got here the same way: drain what was started
    bucketed.remove()

    out.update(_trainer_runs(comm))
    comm.close()
    return out


def _trainer_runs(comm) -> dict:
    """3 optimizer steps through the real Trainer, flat and overlapped, from the same start."""
    from mlbench_worker.data.loader import Batches, channel_stats
    from mlbench_worker.tasks.cifar10.synthetic import generate
    from mlbench_worker.training.metric_sink import Reporter
    from mlbench_worker.training.trainer import Goal, Schedule, Trainer

    data = generate(5, 16 * 3 * comm.size, 16)
    mean, std = channel_stats(data.train_x)
    finals = {}
    for overlap in (False, True):
        model = _model()
        trainer = Trainer(
            model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), Schedule(0.1, 0.1, 0, (), 1.0),
            Goal("light", 0.7, 1), comm, Batches(data.train_x, data.train_y, 16, mean, std),
            Batches(data.test_x, data.test_y, 16, mean, std, augment=False), Reporter(),
            seed=1, device=torch.device("cpu"), print_fn=lambda _m: None, overlap=overlap,
        )  # fmt: skip
        assert trainer.allreduce.overlap == overlap
        trainer.clock_start = time.perf_counter()
        trainer.train_one_epoch(0)
        p = trainer.progress
        assert p.time_comm_total >= p.time_comm >= 0
        finals[overlap] = torch.cat([q.detach().reshape(-1) for q in model.parameters()])
    return {
        "trainer_steps": trainer.progress.step,
        "trainer_params_bitwise": bool(torch.equal(finals[False], finals[True])),
        "trainer_params_max_diff": float((finals[False] - finals[True]).abs().max()),
    }


def kill(backend: str) -> None:
    """Train with overlap; at step 3 rank 1 dies by SIGKILL right after its first bucket
    started, while rank 0 is inside the same step's collectives. mpirun must end the run."""
    from mlbench_worker.training.comm import Communicator

    comm = Communicator(backend)
    print(f"PID {comm.rank} {os.getpid()}", flush=True)
    trainer = _trainer_on(comm)
    allreduce = trainer.allreduce
    assert allreduce.overlap and len(allreduce.buckets) > 2
    # A hook registered after the bucket hooks runs after them: on a parameter of bucket 1,
    # bucket 0 is in flight by then.
    param = trainer.grads.params[allreduce.buckets[1].params[0]]

    def die(_p: torch.Tensor) -> None:
        if comm.rank == 1 and trainer.progress.step == 3 and allreduce._next >= 1:
            print("KILLING rank 1 with a bucket in flight", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    param.register_post_accumulate_grad_hook(die)
    trainer.clock_start = time.perf_counter()
    trainer.train_one_epoch(0)
    if comm.rank == 0:
        print("RESULT survived", flush=True)


def _trainer_on(comm):
    from mlbench_worker.data.loader import Batches, channel_stats
    from mlbench_worker.tasks.cifar10.synthetic import generate
    from mlbench_worker.training.metric_sink import Reporter
    from mlbench_worker.training.trainer import Goal, Schedule, Trainer

    data = generate(4, 16 * 6 * comm.size, 16)
    mean, std = channel_stats(data.train_x)
    model = _model()
    return Trainer(
        model, torch.optim.SGD(model.parameters(), lr=0.1), Schedule(0.1, 0.1, 0, (), 1.0),
        Goal("light", 0.7, 1), comm, Batches(data.train_x, data.train_y, 16, mean, std),
        Batches(data.test_x, data.test_y, 16, mean, std, augment=False), Reporter(),
        seed=2, device=torch.device("cpu"), print_fn=lambda _m: None,
    )  # fmt: skip


def main() -> None:
    mode, backends = sys.argv[1], sys.argv[2:]
    if mode == "kill":
        kill(backends[0])
        return
    results = {backend: same(backend) for backend in backends}
    from mpi4py import MPI

    if MPI.COMM_WORLD.Get_rank() == 0:
        print("RESULT " + json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
