"""Task 3's parts without mpirun: the reader on files in WikiText-2's layout, the shards,
the generated stand-in, the models' parameter counts, and averaged SGD."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest
import torch

from mlbench_worker.models import LM_MODELS, build_language_model
from mlbench_worker.tasks.wikitext2 import reader, synthetic
from mlbench_worker.tasks.wikitext2.data import Columns, batchify, lstm_windows, shard_bounds
from mlbench_worker.tasks.wikitext2.optim import AveragedSGD
from mlbench_worker.training.errors import WorkerError

# Three splits in the real files' layout: a blank first line, headings in = =, @-@ numbers,
# blank lines between paragraphs, and one word of the validation split unknown to training.
TRAIN = (
    " \n = Valkyria Chronicles III = \n \n"
    " The game began development in 2010 , carrying over a large portion . \n"
    " It was released in 1 @,@ 000 copies for the <unk> . \n \n"
    " = = Gameplay = = \n \n"
    " The game 's battle system is the 2 @-@ 3 turn system . \n"
)
VALID = " \n = Gameplay = \n \n The system of 2010 began development . \n"
TEST = " \n = Tower = \n \n The tower was released in 2010 . \n"
TEXTS = {"train": TRAIN, "valid": VALID, "test": TEST}


def test_words_of_each_line_then_eos_and_the_vocabulary_in_order_of_appearance():
    corpus = reader.build(TEXTS, expected=None)
    words = corpus.words
    assert words[:5] == ["<eos>", "=", "Valkyria", "Chronicles", "III"]
    lines = TRAIN.splitlines()
    assert len(corpus.train) == sum(len(line.split()) + 1 for line in lines)
    assert (corpus.train == words.index("<eos>")).sum() == len(lines)  # blank lines too
    decoded = [words[i] for i in corpus.train]
    assert decoded[decoded.index("1") : decoded.index("1") + 3] == ["1", "@,@", "000"]
    assert "@-@" in words and "'s" in words
    # "Tower" and "tower" are not training words: read as <unk>; "2010" is.
    test = [words[i] for i in corpus.test]
    assert test.count("<unk>") == 2 and "2010" in test
    assert corpus.vocab == len(set(TRAIN.split()) | {"<eos>"})


def test_the_archive_is_read_when_its_checksum_matches(tmp_path):
    archive = reader.write_archive(tmp_path / reader.ARCHIVE, TEXTS)
    md5 = hashlib.md5(archive.read_bytes()).hexdigest()
    corpus = reader.load(tmp_path, archive_md5=md5, allow_download=False)
    assert corpus.words == reader.build(TEXTS, expected=None).words


def test_a_truncated_archive_is_a_clear_error(tmp_path):
    archive = reader.write_archive(tmp_path / reader.ARCHIVE, TEXTS)
    md5 = hashlib.md5(archive.read_bytes()).hexdigest()
    archive.write_bytes(archive.read_bytes()[:-40])
    with pytest.raises(WorkerError, match="wrong checksum.*Delete it"):
        reader.load(tmp_path, archive_md5=md5, allow_download=False)
    with pytest.raises(WorkerError, match="damaged or truncated"):
        reader.load(tmp_path, archive_md5=None, expected=None, allow_download=False)


def test_a_zip_without_the_splits_and_a_folder_of_the_wrong_size_are_refused(tmp_path):
    import zipfile

    with zipfile.ZipFile(tmp_path / reader.ARCHIVE, "w") as zf:
        zf.writestr("something/else.txt", "x")
    with pytest.raises(WorkerError, match="not a WikiText-2 archive"):
        reader.load(tmp_path, archive_md5=None, expected=None, allow_download=False)
    folder = tmp_path / reader.FOLDER
    folder.mkdir()
    for split, text in TEXTS.items():
        (folder / f"wiki.{split}.tokens").write_text(text)
    with pytest.raises(WorkerError, match="not the official text.*36718"):
        reader.load(tmp_path, allow_download=False)


def test_missing_data_says_how_to_place_it_by_hand(tmp_path):
    from mlbench_worker.data import DataUnavailable

    with pytest.raises(DataUnavailable, match="place it by hand.*542ccefacc6c27f945fb54453812b3cd"):
        reader.load(tmp_path, allow_download=False)


@pytest.mark.parametrize(("n", "world"), [(1000, 1), (1001, 2), (1003, 3), (17, 4)])
def test_shards_are_contiguous_disjoint_and_cover_the_stream(n, world):
    bounds = [shard_bounds(n, r, world) for r in range(world)]
    assert bounds[0][0] == 0 and all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))
    assert n - bounds[-1][1] < world  # all but fewer than K tokens
    assert len({hi - lo for lo, hi in bounds}) == 1


def test_columns_read_down_and_targets_are_the_next_tokens():
    grid = batchify(np.arange(23), 4)
    assert grid.shape == (5, 4) and list(grid[:, 1]) == [5, 6, 7, 8, 9]
    x, y = next(Columns(grid, torch.device("cpu")).iterate(np.array([[1, 3]])))
    assert x.tolist() == grid[1:4].tolist() and y.tolist() == grid[2:5].reshape(-1).tolist()


def test_random_windows_are_the_same_on_every_rank_and_stay_in_the_stream():
    a, b = lstm_windows(10_000, 70, 3, 1), lstm_windows(10_000, 70, 3, 1)
    assert (a == b).all() and len(a) == (10_000 - 1) // 70
    assert (a[:, 1] >= 1).all() and (a.sum(axis=1) <= 10_000 - 1).all()
    assert 60 < a[:, 1].mean() < 70  # 70 mostly, 35 one time in twenty, then noise
    assert not (lstm_windows(10_000, 70, 3, 2) == a).all()


def test_the_stand_in_has_structure_a_counting_model_finds():
    vocab = 500
    train = synthetic.stream(7, "train", 200_000, vocab)
    valid = synthetic.stream(7, "valid", 20_000, vocab)
    assert train.min() >= 0 and train.max() < vocab
    assert (synthetic.stream(7, "train", 200_000, vocab) == train).all()  # same seed
    # A bigram count model (add-one smoothed) scores far below the vocabulary's size and
    # near the chain's floor: there is something to learn.
    counts = np.ones((vocab, vocab))
    np.add.at(counts, (train[:-1], train[1:]), 1)
    probs = counts / counts.sum(axis=1, keepdims=True)
    ppl = math.exp(-np.log(probs[valid[:-1], valid[1:]]).mean())
    assert synthetic.BEST_PERPLEXITY <= ppl < 1.5 * synthetic.BEST_PERPLEXITY < vocab / 50


def _awd_lstm_parameters(vocab: int, emb: int, hidden: int, layers: int) -> int:
    """The count the paper's configuration gives: a tied embedding (vocab x emb), a decoder
    bias, and per LSTM layer four gates of (input + hidden) weights and two biases."""
    sizes = [emb] + [hidden] * (layers - 1) + [emb]
    lstm = sum(4 * sizes[i + 1] * (sizes[i] + sizes[i + 1] + 2) for i in range(layers))
    return vocab * emb + vocab + lstm


def test_the_awd_lstm_has_the_papers_parameter_count():
    # WikiText-2's 33,278 words: the paper's 33M parameters for its WikiText-2 model.
    model = build_language_model("awd-lstm", 33_278)
    count = sum(p.numel() for p in model.parameters())
    assert count == _awd_lstm_parameters(33_278, 400, 1150, 3) == 33_556_078
    assert model.decoder.weight is model.encoder.weight


def test_the_small_gpt_has_its_parameter_count():
    spec = LM_MODELS["gpt-small"]
    model = build_language_model("gpt-small", 33_278)
    w, layers = spec.embedding, spec.layers
    per_block = (
        2 * 2 * w + (3 * w * w + 3 * w) + (w * w + w) + (4 * w * w + 4 * w) + (4 * w * w + w)
    )
    expected = 33_278 * w + spec.block * w + layers * per_block + 2 * w
    assert sum(p.numel() for p in model.parameters()) == expected == 11_711_488
    assert model.head.weight is model.wte.weight


def test_the_gpt_is_causal():
    torch.manual_seed(0)
    model = build_language_model("gpt-tiny", 50).eval()
    x = torch.randint(0, 50, (1, 12))
    y = x.clone()
    y[0, 8:] = (y[0, 8:] + 1) % 50
    assert torch.allclose(model(x)[0, :8], model(y)[0, :8], atol=1e-6)
    assert not torch.allclose(model(x)[0, 8:], model(y)[0, 8:])


def test_weight_drop_reaches_the_stored_matrix_and_is_off_in_evaluation():
    torch.manual_seed(0)
    model = build_language_model("awd-lstm-tiny", 30)
    x = torch.randint(0, 30, (6, 2))
    logits, _, raw, dropped = model(x, model.init_hidden(2))
    logits.sum().backward()
    grad = model.rnns[0].lstm.weight_hh_l0.grad
    assert grad is not None and 0.3 < (grad == 0).float().mean() < 0.7  # half the entries
    model.eval()
    a = model(x, model.init_hidden(2))[0]
    assert torch.equal(a, model(x, model.init_hidden(2))[0])


def test_averaged_sgd_steps_as_torchs_asgd_and_averages_every_iterate():
    torch.manual_seed(0)
    ours, theirs = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)
    theirs.load_state_dict(ours.state_dict())
    a = AveragedSGD(ours.parameters(), lr=0.1, weight_decay=0.01)
    a.start_averaging()
    b = torch.optim.ASGD(theirs.parameters(), lr=0.1, t0=0, lambd=0.0, weight_decay=0.01)
    iterates = []
    for _ in range(5):
        x = torch.randn(8, 4)
        for model, opt in ((ours, a), (theirs, b)):
            opt.zero_grad()
            model(x).pow(2).sum().backward()
            opt.step()
        iterates.append(ours.weight.detach().clone())
    for p, q in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-6)  # the same steps
    ax = a.state[ours.weight]["ax"]
    assert torch.allclose(ax, torch.stack(iterates).mean(0), atol=1e-6)
    # torch's ASGD restarts its average at the second step: the mean of iterates 2..n.
    assert torch.allclose(
        b.state[theirs.weight]["ax"], torch.stack(iterates[1:]).mean(0), atol=1e-6
    )
    with a.averaged():
        assert torch.equal(ours.weight, ax)
    assert torch.equal(ours.weight, iterates[-1])


def test_averaging_starts_when_validation_is_worse_than_the_best_before_the_last_five():
    from mlbench_worker.tasks.wikitext2.train import stopped_improving

    improving = [6.0, 5.5, 5.2, 5.0, 4.9, 4.8, 4.7]
    assert not stopped_improving(improving, 5)
    assert not stopped_improving([6.0, 5.0, 5.1, 5.2, 5.3, 5.4], 5)  # too few before the window
    assert stopped_improving([6.0, 5.0, 5.1, 5.2, 5.3, 5.4, 5.05], 5)  # worse than 5.0
    assert not stopped_improving([6.0, 5.0, 5.1, 5.2, 5.3, 5.4, 4.99], 5)


def test_the_lstm_rate_follows_each_windows_length_after_the_warm_up():
    from mlbench_worker.tasks.wikitext2.optim import CosineSchedule, LengthScaledSchedule

    s = LengthScaledSchedule(30.0, 60.0, 10, (), 1.0, bptt=70)
    s.seq_len = 70
    assert s(0) == 30.0 and s(5) == 45.0 and s(10) == 60.0
    s.seq_len = 35
    assert s(20) == 30.0
    c = CosineSchedule(1e-4, 1e-3, 10, (), 1.0, total_steps=110, final_lr=1e-4)
    assert c(10) == pytest.approx(1e-3) and c(60) == pytest.approx(5.5e-4)
    assert c(110) == pytest.approx(1e-4) and c(500) == pytest.approx(1e-4)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--train-tokens", "1000", "--test-tokens", "15"], "each needs 2 training and 20 validation"),
        (["--train-tokens", "100", "--test-tokens", "100", "--batch-size", "64"],
         "make no whole step of 64 blocks"),
    ],
)  # fmt: skip
def test_too_little_data_for_a_step_or_an_evaluation_is_refused(tmp_path, args, message):
    from .helpers import run_worker

    proc = run_worker(["gpt-wikitext2", "--model", "gpt-tiny", "--dataset", "synthetic",
                       "--vocab-size", "50", "--data-dir", str(tmp_path), *args])  # fmt: skip
    assert proc.returncode == 1 and message in proc.stderr, proc.stderr[-2000:]


def test_training_accuracy_counts_one_token_in_eight_and_every_position_takes_its_turn():
    """The step's right predictions are counted on every ACCURACY_STRIDE-th token, from a
    position that moves with the step, and scaled to the step's tokens: over as many steps
    as the stride, the estimates add up to the exact count's as many times."""
    from types import SimpleNamespace

    from mlbench_worker.tasks.wikitext2.train import LanguageTrainer
    from mlbench_worker.training.progress import CORRECT, LOSS
    from mlbench_worker.training.sampled_accuracy import ACCURACY_STRIDE

    n, vocab = 64, 11
    y = torch.arange(n) % vocab
    right = torch.rand(n, generator=torch.Generator().manual_seed(3)) < 0.3
    logits = torch.zeros(n, vocab)
    logits[torch.arange(n), torch.where(right, y, (y + 1) % vocab)] = 1.0
    stub = SimpleNamespace(grads=SimpleNamespace(extra=torch.zeros(5)), progress=SimpleNamespace())
    estimates = []
    for step in range(ACCURACY_STRIDE):
        stub.progress.step = step
        LanguageTrainer._slots(stub, torch.tensor(2.0), logits.reshape(8, 8, vocab), y)
        sampled = right[step % ACCURACY_STRIDE :: ACCURACY_STRIDE].sum().item()
        assert stub.grads.extra[CORRECT].item() == sampled * ACCURACY_STRIDE
        assert stub.grads.extra[LOSS].item() == 2.0 * n
        estimates.append(stub.grads.extra[CORRECT].item())
    assert sum(estimates) == ACCURACY_STRIDE * right.sum().item()
    # Fewer tokens than the stride: one of them (the step picks which) counts for all.
    stub.progress.step = 5
    LanguageTrainer._slots(stub, torch.tensor(1.0), logits[:3], y[:3])
    assert stub.grads.extra[CORRECT].item() == 3 * int(right[5 % 3])
