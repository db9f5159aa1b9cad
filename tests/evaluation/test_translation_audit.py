"""The audit of a translation model (shared/evaluation/translation_audit.py): the small
Transformer, trained a few steps on the generated corpus, exported as the worker exports it
(tasks/wmt/wmt_export.py); its greedy hypotheses, decoded as the worker's evaluation
decodes them, match; the references, one changed row, a line cut short or a piece outside
the vocabulary do not, each named by row and piece; a model without its vocabulary, with
another input signature or with NaN logits is refused, naming what is wrong."""

from __future__ import annotations

import base64
import functools
import itertools
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper

from mlbench_worker.shared.evaluation import audit_process, predictions, translation_audit
from mlbench_worker.shared.evaluation.model_audit import ModelRefused
from mlbench_worker.shared.evaluation.test_sets import TestSet
from mlbench_worker.shared.translation_corpus import generated_pairs
from mlbench_worker.tasks.wmt import tokens
from mlbench_worker.tasks.wmt.data import pad
from mlbench_worker.tasks.wmt.setup import build_model
from mlbench_worker.tasks.wmt.train import EVAL_BATCH
from mlbench_worker.tasks.wmt.wmt_export import onnx_bytes

TASK = "transformer-wmt17"
SEED = 11
N = 40  # test sentences


@functools.cache
def trained() -> tuple[torch.nn.Module, bytes]:
    """The small model after 60 Adam steps on the generated corpus, and its vocabulary: it
    ends some sentences by itself and runs others to the length cap."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # two threads on a loaded 2-core machine spin: 114 s of CPU, not 15
    try:
        return _train()
    finally:
        torch.set_num_threads(threads)


def _train() -> tuple[torch.nn.Module, bytes]:
    torch.manual_seed(0)
    train = generated_pairs(SEED, "train", 600)
    vocabulary = tokens.train_model([s for pair in train for s in pair], tokens.SYNTHETIC_VOCAB)
    sp = tokens.processor(vocabulary)
    model = build_model("transformer-small", sp.vocab_size())
    adam = torch.optim.Adam(model.parameters(), lr=2e-3, betas=(0.9, 0.98))
    encoded = tokens.encode_pairs(sp, train)
    src = [encoded["src"][a:b] for a, b in itertools.pairwise(encoded["src_offsets"])]
    tgt = [encoded["tgt"][a:b] for a, b in itertools.pairwise(encoded["tgt_offsets"])]
    for step in range(60):
        picks = range((step * 32) % 576, (step * 32) % 576 + 32)
        decoder_in = pad([tgt[i][:-1] for i in picks], front=tokens.BOS)
        out = pad([tgt[i] for i in picks])
        logits = model(pad([src[i] for i in picks]), decoder_in)[decoder_in != tokens.PAD]
        loss = F.cross_entropy(logits, out[out != tokens.PAD])
        adam.zero_grad()
        loss.backward()
        adam.step()
    return model.eval(), vocabulary


@functools.cache
def exported() -> bytes:
    model, vocabulary = trained()
    return onnx_bytes(model, vocabulary)


def greedy_lines(seed: int = SEED, n: int = N) -> list[str]:
    """The model's hypotheses of the first `n` test sentences, decoded as the worker's
    evaluation decodes them (tasks/wmt/train.py: batches of EVAL_BATCH, padded, capped)."""
    model, vocabulary = trained()
    sp = tokens.processor(vocabulary)
    sources = [np.asarray(sp.encode(s) + [tokens.EOS]) for s, _ in generated_pairs(seed, "test", n)]
    lines: list[str] = []
    for start in range(0, n, EVAL_BATCH):
        source = pad(sources[start : start + EVAL_BATCH])
        longest = min(int(source.shape[1] * 1.5) + 10, model.positions.shape[0] - 1)
        decoded = model.greedy(source, tokens.BOS, tokens.EOS, longest)
        lines += [" ".join(sp.id_to_piece(ids)) for ids in decoded]
    return lines


def references_as_pieces() -> list[str]:
    sp = tokens.processor(trained()[1])
    return [" ".join(sp.encode(ref, out_type=str)) for _, ref in generated_pairs(SEED, "test", N)]


def posted(lines: list[str]) -> predictions.Predictions:
    """`lines` as the run's file of step 100 holds them, written and read back."""
    refs = [ref for _, ref in generated_pairs(SEED, "test", N)]
    with tempfile.TemporaryDirectory() as folder:
        path = predictions.write(
            Path(folder), test_set_digest=predictions.digest_of_text(refs), step=100,
            epoch=1.0, elapsed=5.0, predicted_text=lines,
        )  # fmt: skip
        return predictions.read(path)


TEST_SET = TestSet(TASK, "synthetic", SEED, N)


def audit(lines: list[str], sample: int = N) -> dict:
    model = translation_audit.TranslationModel(exported())
    return translation_audit.audit(model, TEST_SET, posted(lines), sample=sample, sample_seed=7)


def test_the_greedy_hypotheses_match_and_exercise_both_endings():
    lines = greedy_lines()
    model, vocabulary = trained()
    sp = tokens.processor(vocabulary)
    caps = [int((len(sp.encode(s)) + 1) * 1.5) + 10 for s, _ in generated_pairs(SEED, "test", N)]
    ended = [len(line.split()) < cap for line, cap in zip(lines, caps, strict=True)]
    assert any(ended), "no line ended by EOS: the model needs more steps for this test"
    result = audit(lines)
    assert (result["status"], result["differ"], result["examples"]) == ("matches", 0, N), result
    sampled = audit(lines, sample=15)
    assert (sampled["status"], sampled["examples"], sampled["sample"]) == ("matches", 15, True)


def test_the_references_posted_as_hypotheses_are_a_mismatch_naming_row_and_piece():
    result = audit(references_as_pieces())
    assert result["status"] == "mismatch" and result["differ"] == N, result
    assert result["first_rows"][:3] == [0, 1, 2]
    assert "row 0: at piece 0 the model's greedy choice is" in result["why"]


def test_one_changed_row_is_found():
    lines = greedy_lines()
    sp = tokens.processor(trained()[1])
    row = 17
    pieces = lines[row].split(" ")
    at = min(2, len(pieces) - 1)
    pieces[at] = next(p for p in ("▁Hund", "▁Katze") if p != pieces[at])
    assert sp.piece_to_id(pieces[at]) != sp.unk_id()
    lines[row] = " ".join(pieces)
    result = audit(lines)
    assert (result["status"], result["differ"], result["first_rows"]) == ("mismatch", 1, [row])
    assert f"row {row}: at piece {at} " in result["why"]


def test_a_line_cut_short_or_with_a_piece_outside_the_vocabulary_is_a_mismatch():
    lines = greedy_lines()
    sp = tokens.processor(trained()[1])
    caps = [int((len(sp.encode(s)) + 1) * 1.5) + 10 for s, _ in generated_pairs(SEED, "test", N)]
    row = next(i for i, line in enumerate(lines) if 1 < len(line.split()) < caps[i])
    cut = list(lines)
    cut[row] = " ".join(lines[row].split()[:-1])
    result = audit(cut)
    assert result["first_rows"] == [row] and "the model goes on with" in result["why"]
    odd = list(lines)
    odd[3] = "▁Zzyzx " + odd[3]
    result = audit(odd)
    assert result["first_rows"] == [3] and "is not in the model's vocabulary" in result["why"]
    eos = list(lines)
    eos[4] = (eos[4] + " </s>").strip()
    assert audit(eos)["first_rows"] == [4]


def test_the_audit_runs_in_the_bounded_child(tmp_path):
    model = tmp_path / "model.onnx"
    model.write_bytes(exported())
    refs = [ref for _, ref in generated_pairs(SEED, "test", N)]
    path = predictions.write(
        tmp_path, test_set_digest=predictions.digest_of_text(refs), step=100, epoch=1.0,
        elapsed=5.0, predicted_text=greedy_lines(),
    )  # fmt: skip
    request = audit_process.request_of(
        TEST_SET, mode="audit", model=model, predictions=path, sample=N, sample_seed=3,
        precision="fp32",
    )  # fmt: skip
    answer = audit_process.run(request, audit_process.Limits())
    assert answer["result"]["status"] == "matches", answer
    checked = audit_process.run(audit_process.request_of(TEST_SET, mode="check", model=model),
                                audit_process.Limits())  # fmt: skip
    assert set(checked) == {"sha256"}


def with_metadata(data: bytes, value: str | None) -> bytes:
    proto = onnx.load_from_string(data)
    kept = [p for p in proto.metadata_props if p.key != translation_audit.VOCABULARY_KEY]
    del proto.metadata_props[:]
    proto.metadata_props.extend(kept)
    if value is not None:
        proto.metadata_props.add(key=translation_audit.VOCABULARY_KEY, value=value)
    return proto.SerializeToString()


def hand_model(vocab: int, value: float, inputs: int = 2, dtype=TensorProto.INT64) -> bytes:
    """A model of the contract's form whose logits are all `value` (NaN: never finite)."""
    names = {1: ["target_in"], 2: ["source", "target_in"], 3: ["source", "target_in", "x"]}[inputs]
    graph = helper.make_graph(
        [
            helper.make_node("Shape", ["target_in"], ["nt"]),
            helper.make_node("Constant", [], ["v"], value=helper.make_tensor("v", TensorProto.INT64, [1], [vocab])),
            helper.make_node("Concat", ["nt", "v"], ["shape"], axis=0),
            helper.make_node("ConstantOfShape", ["shape"], ["logits"],
                             value=helper.make_tensor("x", TensorProto.FLOAT, [1], [value])),
        ],
        "hand",
        [helper.make_tensor_value_info(n, dtype, ["batch", f"len{i}"]) for i, n in enumerate(names)],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "t", vocab])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    model.metadata_props.add(
        key=translation_audit.VOCABULARY_KEY, value=base64.b64encode(trained()[1]).decode()
    )
    return model.SerializeToString()


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: with_metadata(exported(), None), "metadata has no 'mlbench.sentencepiece_model'"),
        (lambda: with_metadata(exported(), "bm90IGEgbW9kZWw="), "is not a base64 SentencePiece"),
        (lambda: with_metadata(exported(), "%%%"), "is not a base64 SentencePiece"),
        (lambda: hand_model(500, float("nan")), "NaN or infinite logits"),
        (lambda: hand_model(499, 0.0), "V the vocabulary's 500 pieces"),
        (lambda: hand_model(500, 0.0, inputs=1), "takes 1 inputs"),
        (lambda: hand_model(500, 0.0, inputs=3), "takes 3 inputs"),
        (lambda: hand_model(500, 0.0, dtype=TensorProto.FLOAT), "is tensor(float)"),
        (lambda: b"\x08\x07 not a model", "not an ONNX model"),
    ],
    ids=["no-vocabulary", "vocabulary-not-sentencepiece", "vocabulary-not-base64", "nan",
         "other-vocabulary", "one-input", "three-inputs", "float-input", "not-onnx"],
)  # fmt: skip
def test_models_off_the_contract_are_refused_naming_why(make, words):
    with pytest.raises(ModelRefused, match=words.replace("(", r"\(").replace(")", r"\)")):
        translation_audit.TranslationModel(make())


def test_a_constant_model_is_checked_and_its_lines_are_judged():
    # Every logit equal: every piece ties with the best, so any line of known pieces is the
    # greedy choice within the tolerance, and the audit counts the rows it accepted as ties.
    model = translation_audit.TranslationModel(hand_model(500, 0.0))
    verdicts = translation_audit.check_rows(model, ["The dog sees the cat."], ["▁Der ▁Hund"], 1e-4)
    assert verdicts == [(None, True)]
