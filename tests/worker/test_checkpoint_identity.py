"""Which fields make a checkpoint resumable, declared once (shared/checkpoint_identity.py):
the worker's identity of a run is built from them, its `--resume` refuses by them, an older
checkpoint lacking the algorithm and implementation is an fp32 all-reduce run of the
reference loop. And the step counts a schedule is made from before its trainer exists
(data/images.epoch_steps, tasks/wikitext2/data.lstm_steps) are the trainers' own.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mlbench_worker.data.images import epoch_steps, shard_indices
from mlbench_worker.shared import checkpoint_identity
from mlbench_worker.shared.checkpoint_identity import KEYS, first_difference, identity
from mlbench_worker.tasks.wikitext2.data import lstm_steps, lstm_windows
from mlbench_worker.training import checkpoint
from mlbench_worker.training.errors import WorkerError
from mlbench_worker.training.options import parse_args

ARGV = ["resnet20-cifar10", "--dataset", "synthetic", "--seed", "7", "--batch-size", "64",
        "--algorithm", "powersgd", "--algorithm-option", "rank=4"]  # fmt: skip


def test_a_runs_identity_is_its_configuration_with_the_workers_and_the_data_set():
    config = parse_args(ARGV)
    made = checkpoint.identity_of(config, 2, "synthetic")
    assert tuple(made) == KEYS
    assert made == {
        "task": "resnet20-cifar10", "model": "resnet20", "num_workers": 2, "batch_size": 64,
        "seed": 7, "dataset": "synthetic", "algorithm": "powersgd",
        "algorithm_options": config.algorithm_options, "implementation": "reference",
    }  # fmt: skip
    assert made["algorithm_options"] is not config.algorithm_options  # a copy


def test_an_identity_has_every_key_and_no_other():
    values = dict.fromkeys(KEYS, 1) | {"algorithm_options": {}}
    assert tuple(identity(**values)) == KEYS
    with pytest.raises(TypeError, match="missing \\['seed'\\]"):
        identity(**{k: v for k, v in values.items() if k != "seed"})
    with pytest.raises(TypeError, match="unknown \\['lr'\\]"):
        identity(**values, lr=0.1)


def test_the_first_difference_in_the_declared_order_and_older_checkpoints():
    ours = checkpoint.identity_of(parse_args(["resnet20-cifar10"]), 2, "synthetic")
    assert first_difference(ours, ours) is None
    older = {k: v for k, v in ours.items() if k not in checkpoint_identity.BEFORE_DIMENSIONS}
    assert first_difference(older, ours) is None  # an fp32 all-reduce of the reference loop
    assert first_difference(older, {**ours, "implementation": "torch-ddp"}) == (
        "implementation", "reference", "torch-ddp"
    )  # fmt: skip
    other = {**ours, "seed": 3, "model": "resnet32"}
    assert first_difference(other, ours) == ("model", "resnet32", "resnet20")
    assert first_difference({k: v for k, v in ours.items() if k != "seed"}, ours) == (
        "seed", None, ours["seed"]
    )  # fmt: skip
    # Only what the caller names is compared (the master names what its run rules fixed).
    assert first_difference(other, {"task": ours["task"], "num_workers": 2}) is None


def test_resume_refuses_a_checkpoint_of_another_experiment(tmp_path: Path):
    ours = checkpoint.identity_of(parse_args(["resnet20-cifar10"]), 2, "synthetic")
    torch.save({"identity": {**ours, "batch_size": 32}}, tmp_path / checkpoint.FILENAME)
    with pytest.raises(WorkerError, match="is for batch_size 32, this run uses 128"):
        checkpoint.load(tmp_path, ours)
    torch.save({"identity": {**ours, "num_workers": 4}}, tmp_path / checkpoint.FILENAME)
    with pytest.raises(WorkerError, match="written by a run with 4 workers"):
        checkpoint.load(tmp_path, ours)
    torch.save({"identity": ours, "progress": {}}, tmp_path / checkpoint.FILENAME)
    assert checkpoint.load(tmp_path, ours)["identity"] == ours


class Batches:
    def __init__(self, n: int, batch_size: int) -> None:
        self.n, self.batch_size = n, batch_size

    def __len__(self) -> int:
        return self.n

    def steps(self, count: int) -> int:
        return -(-count // self.batch_size)


@pytest.mark.parametrize("n", [0, 1, 127, 128, 129, 1000, 5121])
@pytest.mark.parametrize("world", [1, 2, 3, 8])
@pytest.mark.parametrize("batch", [1, 32, 128])
def test_epoch_steps_are_the_steps_of_every_ranks_shard(n, world, batch):
    batches = Batches(n, batch)
    for rank in range(world):
        for epoch in (0, 3):
            shard = shard_indices(n, rank, world, 11, epoch)
            assert epoch_steps(batches, world) == batches.steps(len(shard))


@pytest.mark.parametrize("rows", [2, 3, 70, 71, 141, 5000])
@pytest.mark.parametrize("bptt", [5, 70])
def test_the_lstm_steps_are_the_windows_of_every_epoch(rows, bptt):
    for epoch in range(3):
        assert lstm_steps(rows, bptt) == len(lstm_windows(rows, bptt, 11, epoch))
