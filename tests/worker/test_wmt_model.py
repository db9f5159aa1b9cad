"""Task 4b's model and the pieces of its recipe: the base Transformer's size against the
closed formula, the tied embedding, greedy decoding, the inverse-square-root rate, batches
by tokens, and the hypotheses put back in the test set's order."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mlbench_worker.models.transformer_mt import TransformerMT
from mlbench_worker.shared.evaluation.bleu import detokenise, scorer
from mlbench_worker.tasks.wmt import tokens
from mlbench_worker.tasks.wmt.data import token_batches
from mlbench_worker.tasks.wmt.setup import InverseSqrtSchedule, build_model
from mlbench_worker.tasks.wmt.task import MT_MODELS
from mlbench_worker.tasks.wmt.train import in_order, smoothed_loss

# The shared source-target vocabulary of the real task (Vaswani et al.: "about 37000").
VOCAB = 37_000
BASE_PARAMETERS = 63_082_496  # the formula below at VOCAB: the count this test states


def formula(vocab: int, d: int, ff: int, layers: int) -> int:
    """Vaswani et al.'s base model counted by hand: one tied embedding (no output bias);
    per attention four d x d matrices and their biases; per feed-forward two matrices and
    biases; a layer norm's gain and bias after each sub-layer (2 per encoder layer, 3 per
    decoder layer); no final layer norm (post-norm); sinusoidal positions have none."""
    attention = 4 * d * d + 4 * d
    feedforward = d * ff + ff + ff * d + d
    norm = 2 * d
    encoder = attention + feedforward + 2 * norm
    decoder = 2 * attention + feedforward + 3 * norm
    return vocab * d + layers * encoder + layers * decoder


def test_the_base_models_parameters_are_the_formulas():
    assert formula(VOCAB, 512, 2048, 6) == BASE_PARAMETERS
    assert tokens.REAL_VOCAB == VOCAB
    model = build_model("transformer-base", VOCAB)
    assert sum(p.numel() for p in model.parameters()) == BASE_PARAMETERS
    spec = MT_MODELS["transformer-base"]
    assert (spec.layers, spec.width, spec.heads, spec.feedforward, spec.dropout) == (
        6, 512, 8, 2048, 0.1,
    )  # fmt: skip


def test_the_small_model_is_the_same_family_and_its_formula_holds_too():
    spec = MT_MODELS["transformer-small"]
    model = build_model("transformer-small", 500)
    expected = formula(500, spec.width, spec.feedforward, spec.layers)
    assert sum(p.numel() for p in model.parameters()) == expected


def test_one_embedding_serves_both_inputs_and_the_output():
    torch.manual_seed(0)
    model = TransformerMT(50, width=16, heads=2, encoder_layers=1, decoder_layers=1,
                          feedforward=32, dropout=0.0)  # fmt: skip
    source = torch.tensor([[5, 6, 7, tokens.EOS]])
    target = torch.tensor([[tokens.BOS, 8, 9]])
    model(source, target).sum().backward()
    # The embedding's gradient gathers the encoder's, the decoder's and the projection's.
    grad = model.embedding.weight.grad
    assert grad is not None and grad[20].abs().sum() > 0  # an id only the projection touched
    names = [n for n, _ in model.named_parameters()]
    assert sum("embedding" in n for n in names) == 1


def test_greedy_decoding_stops_at_eos_and_pads_nothing_into_the_output():
    torch.manual_seed(0)
    model = TransformerMT(30, width=16, heads=2, encoder_layers=1, decoder_layers=1,
                          feedforward=32, dropout=0.0).eval()  # fmt: skip
    source = torch.tensor([[5, 6, tokens.EOS, 0], [7, 8, 9, tokens.EOS]])
    out = model.greedy(source, tokens.BOS, tokens.EOS, max_len=7)
    assert len(out) == 2 and all(len(h) <= 7 for h in out)
    assert all(t not in (tokens.PAD, tokens.EOS) for h in out for t in h)


def test_the_rate_rises_to_its_peak_at_the_warm_up_then_falls_as_one_over_the_square_root():
    schedule = InverseSqrtSchedule(7e-4, 4000)
    assert schedule(0) == schedule(1) == pytest.approx(7e-4 / 4000)
    assert schedule(4000) == pytest.approx(7e-4)
    assert schedule(16_000) == pytest.approx(3.5e-4)
    # The paper's formula at d_model 512: d^-0.5 * min(step^-0.5, step * warmup^-1.5).
    for step in (10, 4000, 30_000):
        paper = 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
        assert schedule(step) == pytest.approx(paper, rel=2e-3)


def test_batches_hold_at_most_their_tokens_with_padding_and_every_pair_that_fits_once():
    rng = np.random.default_rng(0)
    src, tgt = rng.integers(1, 60, 500), rng.integers(1, 60, 500)
    src[3] = 5000  # longer than a batch: left out
    batches = token_batches(src, tgt, 256)
    seen = np.concatenate(batches)
    assert sorted(seen.tolist()) == [i for i in range(500) if i != 3]
    for b in batches:
        assert np.maximum(src[b], tgt[b]).max() * len(b) <= 256
    # Every pair longer than a batch is left out, wherever it falls.
    got = token_batches(np.array([9, 9, 3]), np.array([1, 9, 3]), 8)
    assert [b.tolist() for b in got] == [[2]]


def test_hypotheses_go_back_in_order_and_a_gap_or_a_repeat_is_refused():
    parts = [([0, 2], [["▁Der", "▁Hund", "."], ["▁Ja"]]), ([1], [["▁Die", "▁Katze"]])]
    assert in_order(parts, 3) == ["▁Der ▁Hund .", "▁Die ▁Katze", "▁Ja"]
    with pytest.raises(RuntimeError, match="test sentence 3 was decoded by no rank"):
        in_order(parts, 4)
    with pytest.raises(RuntimeError, match="test sentence 0 was decoded by two ranks"):
        in_order([*parts, ([0], [["▁x"]])], 3)


def test_detokenising_joins_the_pieces_as_the_evaluator_does_and_bleu_is_sacrebleus():
    assert detokenise("▁Der ▁große ▁Hund ▁sieht ▁die ▁Katze .") == "Der große Hund sieht die Katze."
    reference = "Der große Hund sieht die Katze."
    assert scorer().corpus_score([reference], [[reference]]).score == pytest.approx(100.0)
    assert scorer().corpus_score(["Katze"], [[reference]]).score < 10


def test_the_smoothed_loss_is_torchs_and_its_gradient_too_with_the_plain_sum_beside_it():
    torch.manual_seed(0)
    logits = torch.randn(40, 300, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, 300, (40,))
    ours, nll_sum = smoothed_loss(logits, y, 0.1)
    (grad,) = torch.autograd.grad(ours, logits)
    theirs = torch.nn.functional.cross_entropy(logits, y, label_smoothing=0.1)
    (expected,) = torch.autograd.grad(theirs, logits)
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-12)
    assert torch.allclose(grad, expected, rtol=1e-10, atol=1e-14)
    plain = torch.nn.functional.cross_entropy(logits, y, reduction="sum")
    assert nll_sum.item() == pytest.approx(plain.item(), rel=1e-12)
    small = logits.detach()[:6, :20].clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: smoothed_loss(x, y[:6] % 20, 0.1)[0], (small,))
    # At the base model's vocabulary in float32 (the training type), with a token whose
    # logit stands far above the others: torch's value, and its gradient in float64 to
    # within 1e-7 (torch's own float32 gradient is 3e-6 off it here: log-softmax's backward).
    big = torch.randn(16, 37_000, generator=torch.Generator().manual_seed(1)) * 4
    big[3, 7] = 80.0
    big.requires_grad_(True)
    y = torch.randint(0, 37_000, (16,), generator=torch.Generator().manual_seed(2))
    y[3] = 7
    ours, nll_sum = smoothed_loss(big, y, 0.1)
    (grad,) = torch.autograd.grad(ours, big)
    truth = torch.nn.functional.cross_entropy(big.double(), y, label_smoothing=0.1)
    (expected,) = torch.autograd.grad(truth, big)
    assert ours.item() == pytest.approx(truth.item(), rel=1e-6)
    assert (grad - expected).abs().max() <= 1e-7
    plain = torch.nn.functional.cross_entropy(big.detach(), y, reduction="sum")
    assert nll_sum.item() == pytest.approx(plain.item(), rel=1e-5)
