"""Sharding, augmentation and the synthetic data set."""

import numpy as np
import pytest
import torch

from mlbench_worker.data.loader import PAD, Batches, channel_stats, shard_indices
from mlbench_worker.tasks.cifar10.synthetic import generate
from mlbench_worker.training.trainer import Schedule


@pytest.mark.parametrize("n,world", [(1000, 1), (1000, 2), (1003, 4), (50_000, 8)])
def test_shards_are_disjoint_equal_and_complete_every_epoch(n, world):
    orders = []
    for epoch in range(3):
        shards = [shard_indices(n, r, world, seed=7, epoch=epoch) for r in range(world)]
        sizes = {len(s) for s in shards}
        assert sizes == {n // world}  # same number of steps on every rank
        union = np.concatenate(shards)
        assert len(np.unique(union)) == len(union)  # disjoint
        assert len(union) == n - n % world  # complete but for fewer than `world` images
        orders.append(np.concatenate(shards))
    assert not np.array_equal(orders[0], orders[1])  # re-shuffled every epoch


def test_shards_agree_between_ranks_without_talking():
    # Each rank computes its own shard; the same seed must give the same permutation.
    a = shard_indices(500, 0, 2, seed=3, epoch=1)
    b = shard_indices(500, 1, 2, seed=3, epoch=1)
    assert not set(a) & set(b)
    assert np.array_equal(a, shard_indices(500, 0, 2, seed=3, epoch=1))


def test_crop_and_flip_match_a_per_image_reference():
    images = np.random.default_rng(0).integers(0, 256, (16, 3, 32, 32), dtype=np.uint8)
    batches = Batches(images, np.zeros(16, dtype=np.int64), 16)
    x = torch.from_numpy(images)
    out = batches._crop_flip(x, torch.Generator().manual_seed(5))
    gen = torch.Generator().manual_seed(5)
    offsets = torch.randint(0, 2 * PAD + 1, (2, 16), generator=gen)
    flip = torch.rand(16, generator=gen) < 0.5
    padded = torch.nn.functional.pad(x, (PAD, PAD, PAD, PAD))
    for i in range(16):
        ref = padded[i, :, offsets[0, i] : offsets[0, i] + 32, offsets[1, i] : offsets[1, i] + 32]
        assert torch.equal(out[i], ref.flip(2) if flip[i] else ref)


def test_batches_are_normalised_float_and_cover_the_indices():
    data = generate(1, 300, 10)
    mean, std = channel_stats(data.train_x)
    batches = Batches(data.train_x, data.train_y, 128, mean, std, augment=False)
    got = list(batches.iterate(np.arange(300)))
    assert [len(y) for _, y in got] == [128, 128, 44]
    x = torch.cat([b[0] for b in got])
    assert x.dtype == torch.float32
    assert abs(float(x.mean())) < 0.05 and abs(float(x.std()) - 1) < 0.05
    assert torch.equal(torch.cat([b[1] for b in got]), torch.from_numpy(data.train_y))


def test_channels_last_batches():
    data = generate(1, 64, 10)
    x, _ = Batches(data.train_x, data.train_y, 64, channels_last=True).batch(torch.arange(8))
    assert x.is_contiguous(memory_format=torch.channels_last)


def test_synthetic_is_deterministic_balanced_and_has_its_own_test_split():
    a, b = generate(3, 2000, 500), generate(3, 2000, 500)
    assert np.array_equal(a.train_x, b.train_x) and np.array_equal(a.test_y, b.test_y)
    assert a.train_x.shape == (2000, 3, 32, 32) and a.train_x.dtype == np.uint8
    assert not np.array_equal(a.train_x[:500], a.test_x)
    counts = np.bincount(a.train_y, minlength=10)
    assert counts.min() > 150
    # A smaller set is a prefix of a larger one (so --train-images is just a limit).
    assert np.array_equal(generate(3, 1000, 10).train_x, a.train_x[:1000])
    assert not np.array_equal(generate(4, 100, 10).train_x, a.train_x[:100])


def test_synthetic_classes_are_separable_by_their_patterns():
    # Nearest class-mean on raw pixels already beats chance by far: the labels carry signal.
    d = generate(5, 3000, 1000)
    x = d.train_x.reshape(3000, -1).astype(np.float32)
    means = np.stack([x[d.train_y == c].mean(0) for c in range(10)])
    t = d.test_x.reshape(1000, -1).astype(np.float32)
    pred = np.argmin(((t[:, None, :] - means[None]) ** 2).sum(-1), axis=1)
    assert (pred == d.test_y).mean() > 0.4


def test_schedule_warms_up_linearly_then_decays():
    s = Schedule(start_lr=0.1, peak_lr=0.4, warmup_steps=10, decay_steps=(100, 150), factor=0.1)
    assert s(0) == pytest.approx(0.1)
    assert s(5) == pytest.approx(0.25)
    assert s(10) == pytest.approx(0.4) and s(99) == pytest.approx(0.4)
    assert s(100) == pytest.approx(0.04) and s(150) == pytest.approx(0.004)
