"""Task 4b's trainer: the reference Trainer's loop with an encoder-decoder's step and an
evaluation that decodes the test set and scores BLEU.

Everything that makes a benchmark (the clock and its split, the gradient exchange of the
run's algorithm, metrics, goal tracking, time budget, checkpoints) is the reference
Trainer's (training/trainer.py). This subclass supplies what differs for translation:

- `epoch_indices`: this rank's token batches in a new order each epoch (data.PairBatches);
- `forward_backward`: label-smoothed cross-entropy over the step's target tokens; the
  unsmoothed loss's sum (from the same log-sum-exp, `smoothed_loss`) and the tokens
  predicted right (counted on one in eight: training/sampled_accuracy.py) ride in the
  LOSS and CORRECT slots;
  the step's target-token count is the throughput's unit (tokens/s, as fairseq counts);
- `evaluate`: each rank takes its part of the test set (positions r, r + K, ...): the
  teacher-forced loss and token accuracy, and the greedy decoding (beam search is not
  implemented: BLEU here is greedy BLEU, a point or so below the paper's beam of 4).
  Rank 0 gathers the hypotheses back into the test set's order, scores them with
  sacrebleu's corpus BLEU after detokenising them with the evaluator's own rule (SentencePiece
  pieces joined, "▁" made a space), posts that as `val_bleu` (the goal's metric), and
  writes one predictions file of the pieces (`predicted_text`) for the evaluator, which
  grades them against references it holds itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from mlbench_worker.shared import catalogue
from mlbench_worker.shared.evaluation import predictions
from mlbench_worker.shared.evaluation.bleu import detokenise, scorer
from mlbench_worker.tasks.wmt import tokens
from mlbench_worker.tasks.wmt.data import pad
from mlbench_worker.training.prediction_sink import publish
from mlbench_worker.training.progress import CORRECT, LOSS, record_evaluation
from mlbench_worker.training.sampled_accuracy import right_predictions
from mlbench_worker.training.trainer import Trainer

BLEU = "val_bleu"
EVAL_BATCH = 64  # test sentences decoded together


class _SmoothedCrossEntropy(torch.autograd.Function):
    """Label-smoothed cross-entropy (torch's `cross_entropy` with `label_smoothing`, mean over
    the tokens) and the plain cross-entropy's sum beside it, from one log-sum-exp.

    Hand-written because no library here gives both from one pass on a CPU (torch's gives
    only the smoothed value; fused kernels such as apex's or Liger's are CUDA/Triton only),
    and the pass over every token's logits (37,000 of them for the base model) is where the
    loss's cost lies: a log-softmax, a gather and a mean cost 164 ms of CPU a step of 256
    tokens, torch's cross_entropy 145, this 122 (issue 49: the loop may cost no more than a
    plain loop). Per token, with s = logsumexp(x): nll = s - x[y]; the smoothed term is
    s - mean(x); the gradient is softmax(x) - (1 - e) onehot(y) - e / V.
    """

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, y: torch.Tensor, smoothing: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        lse = torch.logsumexp(x, -1)
        nll = lse - x.gather(1, y[:, None]).squeeze(1)
        loss = ((1.0 - smoothing) * nll + smoothing * (lse - x.mean(-1))).mean()
        ctx.save_for_backward(x, y, lse)
        ctx.smoothing = smoothing
        return loss, nll.sum()

    @staticmethod
    def backward(ctx: Any, grad_loss: torch.Tensor, _grad_sum: torch.Tensor) -> tuple:
        x, y, lse = ctx.saved_tensors
        n, vocab = x.shape
        grad = torch.exp(x - lse[:, None])
        grad.sub_(ctx.smoothing / vocab)
        grad.scatter_add_(1, y[:, None], x.new_full((n, 1), ctx.smoothing - 1.0))
        return grad.mul_(grad_loss / n), None, None


def smoothed_loss(
    logits: torch.Tensor, y: torch.Tensor, smoothing: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(the label-smoothed cross-entropy's mean, what torch's cross_entropy with
    `label_smoothing` computes; the plain cross-entropy's sum, detached), in float32 or
    wider whatever the logits' type."""
    x = logits if logits.dtype in (torch.float32, torch.float64) else logits.float()
    loss, nll_sum = _SmoothedCrossEntropy.apply(x, y, smoothing)
    return loss, nll_sum.detach()


class TranslationTrainer(Trainer):
    """Task 4b (see the module docstring and task.py)."""

    task = catalogue.TRANSFORMER_WMT17.name

    def __init__(self, *args, label_smoothing: float, sp_model: bytes, test_sources: list,
                 references: list[str], **kwargs):  # fmt: skip
        super().__init__(*args, **kwargs)
        self.label_smoothing = label_smoothing
        self.sp = tokens.processor(sp_model)
        self.sp_model = sp_model  # carried by the exported model (wmt_export.py)
        self.test_sources = test_sources
        self.references = references
        self.last_bleu: float | None = None

    def epoch_indices(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, epoch, self.comm.rank]).permutation(
            len(self.train_data)
        )

    def forward_backward(self, x: tuple[torch.Tensor, torch.Tensor], y: torch.Tensor) -> None:
        source, decoder_in = x
        model = self.allreduce.train_module or self.model
        logits = model(source, decoder_in)[decoder_in != tokens.PAD]
        loss, nll_sum = smoothed_loss(logits, y, self.label_smoothing)
        scale = self.allreduce.grad_scale
        (loss * scale if scale != 1.0 else loss).backward()
        extra = self.grads.extra
        extra[LOSS] = nll_sum.float()
        extra[CORRECT] = right_predictions(logits, y, self.progress.step)

    @torch.no_grad()
    def evaluate(self) -> tuple[float, float]:
        """This rank's part of the test set: teacher-forced loss and accuracy, and greedy
        hypotheses; rank 0 puts the hypotheses in order and scores them (`last_bleu`)."""
        model, comm = self.model, self.comm
        model.eval()
        mine = list(range(comm.rank, len(self.test_sources), comm.size))
        sums = torch.zeros(3, dtype=torch.float64)
        decoded: list[list[int]] = []
        for start in range(0, len(mine), EVAL_BATCH):
            rows = [self.test_sources[i] for i in mine[start : start + EVAL_BATCH]]
            source = pad(rows).to(self.device)
            targets = [np.asarray(self.sp.encode(self.references[i]) + [tokens.EOS])
                       for i in mine[start : start + EVAL_BATCH]]  # fmt: skip
            decoder_in = pad([t[:-1] for t in targets], front=tokens.BOS).to(self.device)
            out = pad(targets).to(self.device)
            logits = model(source, decoder_in)[decoder_in != tokens.PAD]
            y = out[out != tokens.PAD]
            sums += torch.tensor([
                float(F.cross_entropy(logits, y, reduction="sum")),
                float((logits.argmax(-1) == y).sum()), float(y.shape[0]),
            ], dtype=torch.float64)  # fmt: skip
            longest = min(int(source.shape[1] * 1.5) + 10, model.positions.shape[0] - 1)
            decoded += model.greedy(source, tokens.BOS, tokens.EOS, longest)
        model.train()
        loss_sum, right, count = comm.allreduce_sums(sums.tolist())
        parts = comm.gather_object((mine, [self.sp.id_to_piece(h) for h in decoded]))
        bleu = None
        if comm.rank == 0:
            assert parts is not None
            self.hypotheses = in_order(parts, len(self.test_sources))
            plain = [detokenise(h) for h in self.hypotheses]
            bleu = float(scorer().corpus_score(plain, [self.references]).score)
        self.last_bleu = comm.bcast_object(bleu)
        self.hit_rates = [float(right / max(count, 1))]
        return float(loss_sum / max(count, 1)), self.hit_rates[0]

    def evaluate_and_track(self) -> None:
        with self.allreduce.evaluation():
            val_loss, val_acc = self.evaluate()
        record_evaluation(
            self.progress, val_loss, val_acc, self.elapsed(), self.goal, self.reporter,
            self.comm.rank, self.print, extra={BLEU: self.last_bleu},
        )  # fmt: skip
        sink = self.predictions
        if sink is not None and sink.enabled and self.comm.rank == 0:
            record = self.progress.history[-1]
            sink.last_step = int(record["step"])  # the final model is audited against it
            digest = predictions.digest_of_text(self.references)
            meta = {key: record[key] for key in ("step", "epoch", "elapsed")}
            path = publish(
                sink.folder, sink.reporter, sink.dataset, None, digest,
                {"predicted_text": self.hypotheses}, meta,
            )  # fmt: skip
            if path is not None:
                sink.written.append(path)

    def final_onnx(self) -> bytes:
        """Rank 0, in the evaluation context: the model the last evaluation decoded with, as
        the evaluator audits it against the posted hypotheses (wmt_export.py's contract)."""
        from mlbench_worker.tasks.wmt.wmt_export import onnx_bytes  # the exporter: at the end only

        return onnx_bytes(self.model, self.sp_model)


def in_order(parts: list, size: int) -> list[str]:
    """The ranks' (positions, hypotheses) parts as one list in the test set's order;
    RuntimeError when they do not cover every position once."""
    out: list[str | None] = [None] * size
    for positions, lines in parts:
        for at, line in zip(positions, lines, strict=True):
            if out[at] is not None:
                raise RuntimeError(f"test sentence {at} was decoded by two ranks")
            out[at] = " ".join(line)
    missing = [i for i, line in enumerate(out) if line is None]
    if missing:
        raise RuntimeError(f"test sentence {missing[0]} was decoded by no rank")
    return [line or "" for line in out]
