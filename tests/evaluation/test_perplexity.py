"""Task 3's perplexity graded from the model (shared/evaluation/perplexity.py): the evaluator,
given the run's exported model, the stream it regenerates itself and the run's evaluation
geometry, finds the perplexity and accuracy the task's own `evaluate` computes, for both
models, at 1 and 2 workers, with the AWD-LSTM's averaged weights.

The trainers are the task's, at 1 rank; 2 workers are reproduced by evaluating each rank's
part of the stream with the trainer and summing as the all-reduce does (the parts hold the
same number of positions, so the mean of the two means)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mlbench_worker.models import LM_MODELS, build_language_model
from mlbench_worker.shared.evaluation import perplexity
from mlbench_worker.shared.evaluation.language_model import LanguageModel
from mlbench_worker.shared.evaluation.token_streams import TokenStream, tokens
from mlbench_worker.tasks.wikitext2 import data
from mlbench_worker.tasks.wikitext2.export import evaluated_onnx, onnx_bytes
from mlbench_worker.tasks.wikitext2.optim import AveragedSGD, CosineSchedule, LengthScaledSchedule
from mlbench_worker.tasks.wikitext2.train import AwdLstmTrainer, GptTrainer
from mlbench_worker.training.comm import Communicator
from mlbench_worker.training.metric_sink import Reporter
from mlbench_worker.training.recipe import Goal

SEED, VOCAB = 11, 80
# 3,007 tokens: 2 parts of 1,503, whose GPT blocks end in a shorter one (1,502 = 46 x 32 + 30)
# and whose LSTM columns leave tokens out (1,503 = 10 x 150 + 3), as the run's do.
VALID, TRAIN = 3_007, 20_000
# The run sums float32 cross-entropies per window or batch into float64, the evaluator
# float64 log-sum-exps of float32 logits: the means differ by rounding. Measured here: at
# most 2e-7 of the mean loss. Accuracy: a near tie may rank otherwise (none seen).
LOSS_TOLERANCE = 1e-5
ACCURACY_TOLERANCE = 2  # positions


@pytest.fixture(scope="module")
def comm():
    return Communicator("mpi")


@pytest.fixture(scope="module")
def streams(comm, tmp_path_factory):
    """The run's validation stream (the task's data.load, 1 rank) and its training tokens."""
    loaded = data.load(
        "synthetic", tmp_path_factory.mktemp("data"), SEED, comm, vocab=VOCAB,
        train_tokens=TRAIN, valid_tokens=VALID, say=lambda _m: None,
    )  # fmt: skip
    return loaded.train, loaded.valid


def trained(name: str, train: np.ndarray) -> torch.nn.Module:
    """A tiny model trained for a few steps (plain Adam): logits far from uniform."""
    torch.manual_seed(0)
    model = build_language_model(name, VOCAB)
    lstm = LM_MODELS[name].kind == "lstm"
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    grid = torch.from_numpy(data.batchify(train, 16))
    for step in range(40):
        x, y = grid[step * 20 : step * 20 + 20], grid[step * 20 + 1 : step * 20 + 21]
        opt.zero_grad()
        logits = model(x, model.init_hidden(16))[0] if lstm else model(x.t()).transpose(0, 1)
        F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1)).backward()
        opt.step()
    return model


def trainer_of(name: str, train: np.ndarray, comm: Communicator):
    """The task's trainer around a trained tiny model (as bench_language.py builds one)."""
    model = trained(name, train)
    goal = Goal("never", 0.0, 1, metric="val_perplexity", direction="down")
    common = {"seed": SEED, "device": torch.device("cpu"), "print_fn": lambda _m: None}
    if LM_MODELS[name].kind == "lstm":
        opt = AveragedSGD(model.parameters(), lr=1.0, weight_decay=0.0)
        columns = data.Columns(data.batchify(train, 8), torch.device("cpu"))
        return AwdLstmTrainer(
            model, opt, LengthScaledSchedule(1.0, 1.0, 0, (), 1.0), goal, comm, columns, None,
            Reporter(), bptt=35, alpha=0.0, beta=0.0, nonmono=5, **common,
        )  # fmt: skip
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    blocks = data.Blocks(train, LM_MODELS[name].block, 8, torch.device("cpu"))
    return GptTrainer(
        model, opt, CosineSchedule(1e-3, 1e-3, 0, (), 1.0, total_steps=10), goal, comm, blocks,
        None, Reporter(), block=LM_MODELS[name].block, **common,
    )  # fmt: skip


def runs_own(trainer, valid: np.ndarray, workers: int) -> tuple[float, float]:
    """The run's mean loss and accuracy with `workers` ranks: each rank's part evaluated by
    the task's `evaluate`, the parts' means averaged (equal counts, as the all-reduce sums)."""
    results = []
    for rank in range(workers):
        lo, hi = data.shard_bounds(len(valid), rank, workers)
        trainer.valid_tokens = valid[lo:hi]
        results.append(trainer.evaluate())
    return float(np.mean([r[0] for r in results])), float(np.mean([r[1] for r in results]))


def geometry(trainer, workers: int) -> perplexity.Geometry:
    """What the run records, read as the evaluator reads it."""
    if isinstance(trainer, AwdLstmTrainer):
        config = {"bptt": trainer.bptt, "eval_columns": data.LSTM_EVAL_COLUMNS}
        return perplexity.Geometry.of_run("awd-lstm-wikitext2", workers, config)
    return perplexity.Geometry.of_run("gpt-wikitext2", workers, {"block": trainer.block})


def agree(score: perplexity.Score, own: tuple[float, float], whole: bool = True) -> None:
    loss, accuracy = own
    assert score.whole == whole
    assert abs(score.loss - loss) <= LOSS_TOLERANCE * loss, (score, own)
    assert abs(score.perplexity - np.exp(loss)) <= 2 * LOSS_TOLERANCE * loss * np.exp(loss)
    assert abs(score.accuracy - accuracy) * score.tokens <= ACCURACY_TOLERANCE, (score, own)
    assert score.perplexity < VOCAB / 4 and score.accuracy > 4 / VOCAB  # learned something


def test_the_evaluators_stream_is_the_one_the_run_evaluated(streams):
    _, valid = streams
    mine = tokens(TokenStream("synthetic", SEED, VALID, VOCAB))
    assert mine.dtype == np.int64 and np.array_equal(mine, valid)
    assert not np.array_equal(tokens(TokenStream("synthetic", SEED + 1, VALID, VOCAB)), valid)


@pytest.mark.parametrize("workers", [1, 2])
def test_the_lstm_perplexity_is_the_runs_own_with_averaged_weights(comm, streams, workers):
    train, valid = streams
    trainer = trainer_of("awd-lstm-tiny", train, comm)
    trainer.optimizer.start_averaging()
    for p in trainer.model.parameters():  # two steps: the average is not the last iterate
        p.grad = torch.randn_like(p) * 0.05
    trainer.optimizer.step()
    trainer.optimizer.step()
    raw = [p.detach().clone() for p in trainer.model.parameters()]
    model = LanguageModel(evaluated_onnx(trainer), "lstm", VOCAB)
    assert all(torch.equal(p, q) for p, q in zip(raw, trainer.model.parameters(), strict=True))
    assert trainer.model.training
    own = runs_own(trainer, valid, workers)
    graded = perplexity.score(model, tokens(TokenStream("synthetic", SEED, VALID, VOCAB)),
                              geometry(trainer, workers))  # fmt: skip
    agree(graded, own)
    assert graded.tokens == workers * (VALID // workers // 10 - 1) * 10
    # The last iterate (not what the run evaluates) scores otherwise.
    last = perplexity.score(LanguageModel(onnx_bytes(trainer.model), "lstm", VOCAB), valid,
                            geometry(trainer, workers))  # fmt: skip
    assert abs(last.loss - graded.loss) > 10 * LOSS_TOLERANCE * graded.loss


@pytest.mark.parametrize("workers", [1, 2])
def test_the_gpt_perplexity_is_the_runs_own(comm, streams, workers):
    train, valid = streams
    trainer = trainer_of("gpt-tiny", train, comm)
    model = LanguageModel(evaluated_onnx(trainer), "gpt", VOCAB)
    graded = perplexity.score(model, valid, geometry(trainer, workers))
    agree(graded, runs_own(trainer, valid, workers))
    assert graded.tokens == workers * (VALID // workers - 1)  # 3,006 or 2 x 1,502


def test_max_tokens_scores_the_first_of_the_runs_positions_as_the_run_scores_them(comm, streams):
    train, valid = streams
    trainer = trainer_of("gpt-tiny", train, comm)
    model = LanguageModel(onnx_bytes(trainer.model), "gpt", VOCAB)
    shape = geometry(trainer, 2)
    cut = perplexity.score(model, valid, shape, max_tokens=2 * 3 * 32 + 5)
    assert not cut.whole and cut.tokens == 2 * 3 * 32  # three whole blocks of each part
    # The run's evaluation of each part's first three blocks (and the token after them).
    parts = [
        valid[lo : lo + 3 * 32 + 1] for lo, _ in (data.shard_bounds(VALID, r, 2) for r in (0, 1))
    ]
    agree(cut, runs_own(trainer, np.concatenate(parts), 2), whole=False)
    lstm = trainer_of("awd-lstm-tiny", train, comm)
    model = LanguageModel(onnx_bytes(lstm.model), "lstm", VOCAB)
    cut = perplexity.score(model, valid, geometry(lstm, 2), max_tokens=20 * 40)
    assert not cut.whole and cut.tokens == 20 * 40  # 41 rows of 20 columns: 40 predicted
    with pytest.raises(ValueError, match="less than a row of 20 columns"):
        perplexity.score(model, valid, geometry(lstm, 2), max_tokens=19)


def test_the_geometry_is_read_from_what_the_run_records():
    lstm = perplexity.Geometry.of_run("awd-lstm-wikitext2", 4, {"bptt": 70, "alpha": 2.0})
    assert lstm == perplexity.Geometry("lstm", 4, 70, 10)  # before eval_columns was recorded
    assert perplexity.EVAL_COLUMNS == data.LSTM_EVAL_COLUMNS
    gpt = perplexity.Geometry.of_run("gpt-wikitext2", 2, {"block": 128})
    assert gpt == perplexity.Geometry("gpt", 2, 128, 0)
    assert gpt.positions(1001) == 2 * 499 and lstm.positions(4000) == 4 * 99 * 10
    with pytest.raises(ValueError, match="not a language model's"):
        perplexity.family_of("resnet20-cifar10")
    with pytest.raises(ValueError, match="scores no position"):
        perplexity.Geometry("lstm", 4, 70, 10).check(79)
