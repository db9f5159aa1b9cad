"""Task 3's grading refuses what it cannot grade, naming the problem: models that are not
ONNX, have the wrong inputs or outputs, another vocabulary, a fixed batch, NaN scores, or
look at the token they predict; and it reads WikiText-2's tokens only from the checksummed
archive. The models are written by hand with the onnx package (a few nodes each), so the
perplexity of the honest one is also counted here by hand."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest
from onnx import TensorProto, helper

from mlbench_worker.shared import wikitext2
from mlbench_worker.shared.evaluation import perplexity
from mlbench_worker.shared.evaluation.file_labels import LabelsUnavailable
from mlbench_worker.shared.evaluation.language_model import LanguageModel, ModelRefused
from mlbench_worker.shared.evaluation.token_streams import TokenStream, tokens
from tests.worker.test_wikitext2 import TEXTS

VOCAB = 30
STREAM = np.random.default_rng(4).integers(0, VOCAB, 2_000)
GPT = perplexity.Geometry("gpt", 2, 16, 0)
LSTM = perplexity.Geometry("lstm", 2, 7, 4)


def const(name: str, kind: int, dims: list, values: list):
    """A Constant node giving tensor `name`."""
    return helper.make_node(
        "Constant", [], [name], value=helper.make_tensor(name, kind, dims, values)
    )


def model(
    *,
    words: int = VOCAB,
    look_ahead: bool = False,
    nan: bool = False,
    state: list | None = None,
    token_dims: tuple = ("N", "T"),
    token_type: int = TensorProto.INT64,
) -> bytes:
    """Logits = one-hot of the current token (1 on it, 0 elsewhere), or of the next one
    (`look_ahead`, 10 on it); with `state` ([N, S] dims) an LSTM-like model whose next
    state is its state."""
    source = "tokens"
    hot = [0.0, 10.0 if look_ahead else 1.0]
    nodes = [
        const("depth", TensorProto.INT64, [], [words]),
        const("values", TensorProto.FLOAT, [2], hot),
    ]
    if token_type != TensorProto.INT64:
        nodes.append(helper.make_node("Cast", ["tokens"], ["ids"], to=TensorProto.INT64))
        source = "ids"
    if look_ahead:  # position t gets the token at t + 1 (the first one, rotated, at the end)
        nodes += [
            const("one", TensorProto.INT64, [1], [1]),
            const("zero", TensorProto.INT64, [1], [0]),
            const("end", TensorProto.INT64, [1], [2**62]),
            helper.make_node("Slice", [source, "one", "end", "one"], ["later"]),
            helper.make_node("Slice", [source, "zero", "one", "one"], ["first"]),
            helper.make_node("Concat", ["later", "first"], ["shifted"], axis=1),
        ]  # fmt: skip
        source = "shifted"
    nodes.append(helper.make_node("OneHot", [source, "depth", "values"], ["hot"], axis=-1))
    if nan:
        nodes += [
            const("nan", TensorProto.FLOAT, [], [math.nan]),
            helper.make_node("Mul", ["hot", "nan"], ["logits"]),
        ]
    else:
        nodes.append(helper.make_node("Identity", ["hot"], ["logits"]))
    inputs = [helper.make_tensor_value_info("tokens", token_type, list(token_dims))]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", "T", words])]
    if state is not None:
        nodes.append(helper.make_node("Identity", ["state"], ["next_state"]))
        inputs.append(helper.make_tensor_value_info("state", TensorProto.FLOAT, state))
        outputs.append(helper.make_tensor_value_info("next_state", TensorProto.FLOAT, state))
    graph = helper.make_graph(nodes, "lm", inputs, outputs)
    onnx_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx_model.ir_version = 8
    return onnx_model.SerializeToString()


def by_hand(stream: np.ndarray, pairs: list[tuple[int, int]]) -> tuple[float, float]:
    """The one-hot model's mean loss and accuracy over (position of the input, of the
    target) pairs: log(V - 1 + e) - [target == input]; right where they are equal."""
    same = np.array([stream[i] == stream[j] for i, j in pairs])
    return float(np.mean(math.log(VOCAB - 1 + math.e) - same)), float(same.mean())


def test_an_honest_model_is_graded_as_counted_by_hand_over_the_runs_positions():
    gpt = perplexity.score(LanguageModel(model(), "gpt", VOCAB), STREAM, GPT)
    part = STREAM.size // 2  # 1,000 a part: 999 predictions in 62 blocks of 16 and one of 7
    pairs = [(r * part + i, r * part + i + 1) for r in range(2) for i in range(part - 1)]
    assert gpt.tokens == 2 * 999 and gpt.whole
    assert (gpt.loss, gpt.accuracy) == pytest.approx(by_hand(STREAM, pairs), rel=1e-6)
    assert gpt.perplexity == pytest.approx(math.exp(gpt.loss))
    lstm = LanguageModel(model(state=["N", 5]), "lstm", VOCAB)
    score = perplexity.score(lstm, STREAM, LSTM)
    rows = part // 4  # 4 columns of 250 rows a part: 249 predictions a column
    pairs = [(r * part + c * rows + i, r * part + c * rows + i + 1)
             for r in range(2) for c in range(4) for i in range(rows - 1)]  # fmt: skip
    assert score.tokens == 2 * 4 * 249 and score.whole
    assert (score.loss, score.accuracy) == pytest.approx(by_hand(STREAM, pairs), rel=1e-6)


@pytest.mark.parametrize(("data", "family", "message"), [
    (b"not an onnx model", "gpt", "not an ONNX model"),
    (model(), "lstm", "takes 1 inputs and gives 1 outputs; task 3's lstm contract"),
    (model(state=["N", 5]), "gpt", "takes 2 inputs and gives 2 outputs"),
    (model(words=VOCAB + 1), "gpt", "scores 31 words; the stream's vocabulary has 30"),
    (model(token_dims=(2, "T")), "gpt", "batch is fixed at 2"),
    (model(token_dims=("N", 16)), "gpt", "length is fixed at 16"),
    (model(token_type=TensorProto.FLOAT), "gpt", r"input 0 is tensor\(float\)"),
    (model(state=["N", "S"]), "lstm", "float32 N x S state with S fixed"),
    (model(nan=True), "gpt", "NaN or infinite logits"),
])  # fmt: skip
def test_a_model_off_the_contract_is_refused(data, family, message):
    with pytest.raises(ModelRefused, match=message):
        LanguageModel(data, family, VOCAB)


@pytest.mark.parametrize(("state", "geometry"), [(None, GPT), (["N", 5], LSTM)])
def test_a_model_that_looks_at_the_token_it_predicts_is_refused(state, geometry):
    cheat = LanguageModel(model(look_ahead=True, state=state), geometry.family, VOCAB)
    with pytest.raises(ModelRefused, match="looks ahead: its logits at position"):
        perplexity.score(cheat, STREAM, geometry)


def test_a_stream_or_geometry_that_does_not_fit_is_a_value_error():
    gpt = LanguageModel(model(), "gpt", VOCAB)
    with pytest.raises(ValueError, match="outside the vocabulary of 30"):
        perplexity.score(gpt, STREAM + 1, GPT)
    with pytest.raises(ValueError, match="a lstm evaluation of a gpt model"):
        perplexity.score(gpt, STREAM, LSTM)
    with pytest.raises(ValueError, match="less than a block of every part"):
        perplexity.score(gpt, STREAM, GPT, max_tokens=31)
    record = {"task": "gpt-wikitext2", "workers": 2, "dataset": "synthetic", "seed": 4}
    with pytest.raises(ValueError, match="config does not record 'block'"):
        perplexity.grade(model(), **record, config={"valid_tokens": 900, "vocab": VOCAB})
    graded = perplexity.grade(model(), **record, config={"valid_tokens": 900, "vocab": VOCAB,
                                                         "block": 16})  # fmt: skip
    assert graded.whole and graded.tokens == 2 * 449


def archive(tmp_path) -> str:
    path = wikitext2.write_archive(tmp_path / wikitext2.ARCHIVE, TEXTS)
    return hashlib.md5(path.read_bytes()).hexdigest()


def test_wikitext2s_tokens_come_from_the_archive_by_the_tasks_rule(tmp_path):
    md5 = archive(tmp_path)
    corpus = wikitext2.build(TEXTS, expected=None)
    for split in ("valid", "test"):
        want = corpus.split(split)
        stream = TokenStream("wikitext2", 0, want.size - 3, corpus.vocab, split, str(tmp_path))
        assert np.array_equal(tokens(stream, md5), want[:-3])
    with pytest.raises(ValueError, match=f"has {corpus.vocab} words; the run says 5"):
        tokens(TokenStream("wikitext2", 0, 4, 5, data_dir=str(tmp_path)), md5)
    with pytest.raises(ValueError, match="asks for 1000 tokens; the split holds"):
        tokens(TokenStream("wikitext2", 0, 1000, corpus.vocab, data_dir=str(tmp_path)), md5)


def test_wikitext2s_tokens_are_not_read_from_unchecked_files(tmp_path):
    archive(tmp_path)
    stream = TokenStream("wikitext2", 0, 4, 33_278, data_dir=str(tmp_path))
    with pytest.raises(LabelsUnavailable, match="wrong checksum.*will not read tokens"):
        tokens(stream)  # not the official archive's MD5
    (tmp_path / wikitext2.ARCHIVE).unlink()
    (tmp_path / wikitext2.FOLDER).mkdir()
    with pytest.raises(LabelsUnavailable, match="no published checksum: keep the archive"):
        tokens(stream)
