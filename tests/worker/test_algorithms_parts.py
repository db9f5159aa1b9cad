"""The algorithms' pieces in one process: bit packing, Gram-Schmidt, topologies, one rank,
the summary table and checkpoints that name their algorithm."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mlbench_worker.algorithms.decentralized import neighbours
from mlbench_worker.algorithms.powersgd import orthogonalise
from mlbench_worker.algorithms.signsgd import pack, unpack


@pytest.mark.parametrize("d", [1, 7, 8, 9, 1000])
def test_sign_bits_pack_like_numpy_and_come_back(d):
    bits = torch.rand(d, generator=torch.Generator().manual_seed(d)) > 0.5
    packed = pack(bits)
    assert packed.dtype == torch.uint8 and packed.numel() == -(-d // 8)
    assert np.array_equal(packed.numpy(), np.packbits(bits.numpy()))
    assert torch.equal(unpack(packed, d), bits)


def test_gram_schmidt_gives_orthonormal_columns_and_survives_zeros():
    p = torch.randn(50, 4, generator=torch.Generator().manual_seed(1))
    q = orthogonalise(p.clone())
    assert torch.allclose(q.t() @ q, torch.eye(4), atol=1e-5)
    # The same span: P = Q R with R upper triangular.
    r = q.t() @ p
    assert torch.allclose(q @ r, p, atol=1e-4) and torch.allclose(r, r.triu(), atol=1e-4)
    zero = orthogonalise(torch.zeros(5, 2))
    assert torch.isfinite(zero).all() and float(zero.abs().max()) == 0.0


@pytest.mark.parametrize("size,shape", [(9, (3, 3)), (12, (3, 4)), (16, (4, 4))])
def test_torus_neighbours_are_four_distinct_and_mutual(size, shape):
    rows, cols = shape
    for rank in range(size):
        peers = neighbours(rank, size, "torus")
        assert len(peers) == 4 and rank not in peers
        i, j = divmod(rank, cols)
        assert {divmod(p, cols) for p in peers} == {
            ((i - 1) % rows, j),
            ((i + 1) % rows, j),
            (i, (j - 1) % cols),
            (i, (j + 1) % cols),
        }
        assert all(rank in neighbours(p, size, "torus") for p in peers)  # W is symmetric


def test_ring_neighbours():
    assert neighbours(0, 2, "ring") == [1]  # two ranks: the other one, once
    assert neighbours(0, 5, "ring") == [1, 4] and neighbours(3, 5, "ring") == [2, 4]


def test_one_rank_sends_nothing_whatever_the_algorithm():
    from mlbench_worker.shared.algorithm_catalogue import GENERAL_ALGORITHMS, check

    from .test_buckets import _trainer

    trainer = _trainer()
    for name in GENERAL_ALGORITHMS:  # lbfgs runs on Spark only
        if name == "decentralized":
            continue  # needs 2 ranks (refused by check)
        trainer.set_algorithm(name, check(name, {}, 1)[0])
        exchange = trainer.allreduce
        exchange.begin()
        trainer.forward_backward(*next(trainer.train_data.iterate(np.arange(16))))
        exchange.finish()
        exchange.after_step(4)
        assert exchange.comm_bytes == 0, name
        assert torch.isfinite(trainer.grads.buffer).all(), name
    assert check("decentralized", {}, 1)[1] == ["topology ring needs 2 workers or more"]


def test_summary_table_names_the_algorithm_and_its_bytes():
    from mlbench_worker.training.summary_table import summary_table

    from .test_summary_table import _rows, _summary

    summary = _summary("resnet20-cifar10", "synthetic", "images_per_sec", "images")
    table = summary_table(summary)
    assert "algorithm" not in table  # an older summary: no rows for what it lacks
    summary |= {
        "algorithm": "powersgd",
        "algorithm_options": {"rank": 4},
        "comm_bytes_per_step": 56784.0,
        "compression_ratio": 19.0,
    }
    lines = _rows(summary_table(summary))
    assert lines["algorithm"] == "powersgd (rank 4)"
    assert lines["comm bytes/step"] == "56,784 B"
    assert lines["compression"] == "19x (vs fp32 all-reduce)"


def test_a_checkpoint_resumes_only_with_its_algorithm(tmp_path):
    from mlbench_worker.training import checkpoint
    from mlbench_worker.training.errors import WorkerError

    identity = {"task": "t", "model": "m", "num_workers": 2, "batch_size": 8, "seed": 1,
                "dataset": "synthetic"}  # fmt: skip
    old = tmp_path / "old"  # written before algorithms existed: an fp32 all-reduce run
    old.mkdir()
    torch.save({"identity": identity}, old / checkpoint.FILENAME)
    mine = {**identity, "algorithm": "allreduce", "algorithm_options": {"precision": "fp32"}}
    assert checkpoint.load(old, mine)["identity"] == identity
    with pytest.raises(WorkerError, match="is for algorithm 'allreduce', this run uses 'topk'"):
        checkpoint.load(old, {**mine, "algorithm": "topk", "algorithm_options": {}})
    with pytest.raises(WorkerError, match="algorithm_options"):
        checkpoint.load(old, {**mine, "algorithm_options": {"precision": "bf16"}})


def test_powersgd_revives_a_warm_start_that_a_zero_gradient_emptied():
    """A matrix whose first gradient is exactly zero (e.g. a residual branch's last conv
    initialised to zero) must still be updated later: its Q column is redrawn, not kept 0."""
    from mlbench_worker.shared.algorithm_catalogue import check

    from .test_buckets import _trainer

    trainer = _trainer()
    trainer.set_algorithm("powersgd", check("powersgd", {"rank": 2}, 1)[0])
    exchange = trainer.allreduce
    exchange.begin()  # no backward: every gradient is zero this step
    exchange.finish()
    assert all(bool((q.norm(dim=0) > 0).all()) for q in exchange.qs)
    exchange.begin()
    trainer.forward_backward(*next(trainer.train_data.iterate(np.arange(16))))
    exchange.finish()
    for start, n, m, _ in exchange.matrices:
        applied = trainer.grads.buffer[start : start + n * m]
        assert applied.abs().sum() > 0, "a compressed matrix got no update"


def test_a_checkpoint_from_before_bytes_were_counted_is_credited_a_full_allreduce_a_step(
    monkeypatch,
):
    """Otherwise a resumed run divides only its own bytes by all the steps, parent's
    included, and reports a compression it never had."""
    from dataclasses import asdict

    from mlbench_worker.training import checkpoint

    from .test_buckets import _trainer

    trainer = _trainer()
    monkeypatch.setattr(trainer.comm, "size", 2)
    progress = asdict(trainer.progress)
    progress.pop("comm_bytes")
    progress["step"] = 10
    state = {"model": trainer.model.state_dict(), "optimizer": trainer.optimizer.state_dict(),
             "progress": progress}  # fmt: skip
    checkpoint.restore(trainer, state)
    assert trainer.progress.comm_bytes == 10 * trainer.full_allreduce_bytes()
