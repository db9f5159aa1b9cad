"""Fuzz: every endpoint that parses a client's file answers a damaged one with a refusal
(400, 409 or 413, in the API's error JSON, a 400 naming the file's parameter), never a
5xx, and stores nothing (issue 42: a deflate stream with one byte flipped, or a .npy
header left unclosed, answered 500).

Predictions (POST /api/runs/<id>/predictions/): a valid file of task 1a, written by
np.savez and by np.savez_compressed, and one of task 2 (compressed), then the seeded corpus
of upload_mutants.py (zip damage, truncations, huge declared sizes, random bytes, broken
.npy headers) and files that are valid .npz but of wrong dtypes, shapes and header values.
Models (POST /api/runs/<id>/model/): the honest task-1a model of
tests/evaluation/hostile_models.py, damaged; the check itself (model_audit.Model) gets a
larger corpus, in a child process of its own so that a crash of onnxruntime would be
reported, not end the test run. Which refusal
comes back (a 409 for a step already graded, a 400 for a bad file) is not the point: only
that it is one and that the digest of the stored rows and files did not change.
"""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import subprocess
import sys
import textwrap
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from mlbench_master.api.models import Run
from mlbench_master.grading import model_auditing, model_files, scoring
from mlbench_worker.shared.evaluation import generated_labels, predictions, test_sets
from mlbench_worker.shared.evaluation.predictions import digest_of
from tests.api import translation_bodies as mt
from tests.api import upload_mutants
from tests.api.conftest import worker_client
from tests.api.predictions_bodies import CIFAR, SEED, N, cifar_labels, post
from tests.api.test_model_audit_api import post_model
from tests.evaluation import hostile_models

pytestmark = pytest.mark.django_db

FUZZ_SEED = 42
LOGREG, LOGREG_ROWS = "logreg-epsilon", 1000


@pytest.fixture(autouse=True)
def _fresh(settings, tmp_path):
    settings.MLBENCH_DATA_DIR = tmp_path / "datasets"  # empty: the generated sets only
    scoring.forget_evaluators()


def _header(digest: str, step: int = 100) -> dict[str, np.ndarray]:
    return {
        "format": np.array(predictions.FORMAT),
        "test_set_digest": np.array(digest),
        "step": np.array(step),
        "epoch": np.array(1.5),
        "elapsed": np.array(30.25),
    }


def _saved(arrays: dict[str, np.ndarray], compressed: bool) -> bytes:
    buffer = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buffer, **arrays)
    return buffer.getvalue()


def _cifar_arrays(step: int = 100) -> dict[str, np.ndarray]:
    labels = cifar_labels()
    return {**_header(digest_of(labels), step), predictions.CLASS: labels.copy()}


def _logreg_arrays(step: int = 100) -> dict[str, np.ndarray]:
    labels = generated_labels.epsilon(3, LOGREG_ROWS, test_sets.EPSILON_FEATURES)
    return {**_header(digest_of(labels), step), predictions.LABEL: labels.copy()}


def _translation_arrays(step: int = 100) -> dict[str, np.ndarray]:
    lines = "\n".join(mt.pieces(r) for r in mt.references()).encode()
    text = np.frombuffer(lines, np.uint8).copy()
    return {**_header(predictions.digest_of_text(mt.references()), step), predictions.TEXT: text}


def _wrong_arrays(arrays: dict[str, np.ndarray], name: str) -> list[tuple[str, dict]]:
    """Valid .npz files of wrong contents: dtypes, shapes, header values, fields."""
    rows = arrays[name]
    n = len(rows)
    cases = {
        "predictions as floats": rows.astype(float),
        "predictions with a NaN": np.where(np.arange(n) == 3, np.nan, rows.astype(float)),
        "predictions as complex numbers": rows.astype(complex),
        "predictions as booleans": rows > 0,
        "predictions as text": rows.astype(str),
        "predictions as bytes": rows.astype("S3"),
        "predictions as dates": rows.astype("datetime64[s]"),
        "predictions as records": np.zeros(n, dtype=[("a", "<i8"), ("b", "<f4")]),
        "predictions in two columns": np.stack([rows, rows], axis=1),
        "predictions as one number": np.array(rows[0]),
        "no predictions": rows[:0],
        "one prediction too many": np.concatenate([rows, rows[:1]]),
        "one prediction too few": rows[:-1],
        "predictions of int64's largest": np.full(n, np.iinfo(np.int64).max),
        "predictions as uint64": rows.astype(np.uint64),
    }
    out = [(what, {**arrays, name: value}) for what, value in cases.items()]
    header = {
        "step as text": ("step", np.array("100")),
        "step as a float": ("step", np.array(100.5)),
        "a negative step": ("step", np.array(-1)),
        "step of uint64's largest": ("step", np.array(np.iinfo(np.uint64).max)),
        "an epoch of NaN": ("epoch", np.array(np.nan)),
        "an infinite elapsed": ("elapsed", np.array(np.inf)),
        "another format": ("format", np.array("mlbench-predictions-9")),
        "format as a number": ("format", np.array(1)),
        "a digest as bytes": ("test_set_digest", np.array(b"ab")),
        "a digest in a list": ("test_set_digest", np.array(["ab", "cd"])),
    }
    out += [(what, {**arrays, field: value}) for what, (field, value) in header.items()]
    extra = {predictions.LABEL if name == predictions.CLASS else predictions.CLASS: rows}
    out.append(("both kinds of predictions", {**arrays, **extra}))
    out.append(("top 5 of the wrong shape", {**arrays, predictions.TOP5: np.stack([rows] * 3, 1)}))
    out.append(("an unknown field", {**arrays, "confidence": rows}))
    out.append(("the step missing", {k: v for k, v in arrays.items() if k != "step"}))
    return out


def predictions_corpus(
    arrays: dict[str, np.ndarray], name: str, rng: random.Random, writings=(False, True)
) -> list:
    """(what, body) for one task's valid file: each of its writings (compressed or not)
    damaged, its .npy members replaced by broken ones, and valid files of wrong contents."""
    corpus = []
    for compressed in writings:
        how = "compressed" if compressed else "stored"
        valid = _saved(arrays, compressed)
        corpus += [(f"{how}: {w}", b) for w, b in upload_mutants.zip_mutants(valid, rng)]
        members = {f"{k}.npy": _npy_bytes(v) for k, v in arrays.items()}
        for what, bad in upload_mutants.npy_members(rng):
            field = rng.choice(sorted(members))
            files = {**members, field: bad}
            corpus.append((f"{how}: {field} {what}", upload_mutants.zipped(files, compressed)))
        corpus += [(f"{how}: {w}", _saved(a, compressed)) for w, a in _wrong_arrays(arrays, name)]
    plain = upload_mutants.zipped({f"{k}.npy": _npy_bytes(v) for k, v in arrays.items()}, False)
    corpus.append(("a member that is no .npy", upload_mutants.zipped({"step": b"100"}, False)))
    corpus.append(("a member twice", _twice(plain)))
    corpus.append(("a single .npy", _npy_bytes(arrays[name])))
    corpus += upload_mutants.random_bodies(rng)
    return corpus


def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def _twice(body: bytes) -> bytes:
    """A zip holding its first member a second time (a writer of zips allows it)."""
    with zipfile.ZipFile(io.BytesIO(body)) as zf:
        first = zf.infolist()[0]
        data = zf.read(first)
    buffer = io.BytesIO(body)
    with warnings.catch_warnings(), zipfile.ZipFile(buffer, "a") as zf:
        warnings.simplefilter("ignore")  # "Duplicate name"
        zf.writestr(first.filename, data)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("task", "arrays", "name", "writings"),
    [
        pytest.param(CIFAR, _cifar_arrays, predictions.CLASS, (False, True), id="task 1a"),
        pytest.param(LOGREG, _logreg_arrays, predictions.LABEL, (True,), id="task 2"),
        pytest.param(mt.TASK, _translation_arrays, predictions.TEXT, (False, True), id="task 4b"),
    ],
)
def test_damaged_predictions_are_refused_never_a_500(
    make_run, tmp_path, task, arrays, name, writings
):
    rows, seed = {CIFAR: (N, SEED), LOGREG: (LOGREG_ROWS, 3), mt.TASK: (mt.N, mt.SEED)}[task]
    run = make_run(state=Run.STARTED, task=task, seed=seed, test_examples=rows)
    client = worker_client(run)
    valid = arrays()
    r = post(client, run, _saved(valid, compressed=True))
    assert r.status_code == 201, r.json()
    corpus = predictions_corpus(valid, name, random.Random(f"{FUZZ_SEED} {task}"), writings)
    assert len(corpus) > 150
    # A damage the reader need not see is taken: graded (201), the same grade again (200)
    # or stored without a grade (202).
    said = upload_mutants.fuzz(
        lambda body: post(client, run, body), corpus, "predictions", taken=(200, 201, 202)
    )
    assert upload_mutants.refused(said) > 0.9 * len(corpus)
    for what, message in said.items():  # the damage the issue found: refused, named
        if what.endswith("data flipped"):
            member = what.split(": ")[1]
            assert message is not None and f"member {member!r}" in message, (what, message)
        if what.endswith("an unclosed header dictionary"):
            assert message is not None and "header is unbalanced" in message, (what, message)
    flipped = [m for w, m in said.items() if w.startswith("compressed") and "data" in w]
    assert any("holds damaged compressed data" in str(m) for m in flipped), flipped
    # The master keeps serving, and grades the next valid file.
    r = post(client, run, _saved(arrays(step=200), compressed=False))
    assert r.status_code == 201, r.json()


def test_a_zip_of_an_unknown_version_is_refused_not_a_500(make_run):
    run = make_run(state=Run.STARTED, task=CIFAR, seed=SEED, test_examples=N)
    body = bytearray(_saved(_cifar_arrays(), compressed=True))
    first = upload_mutants.members(bytes(body))[0]
    body[first.central + upload_mutants.CENTRAL_FIELDS["version needed"][0]] = 99  # 9.9
    before = upload_mutants.stored_state()
    r = post(worker_client(run), run, bytes(body))
    assert r.status_code == 400 and "zip file version 9.9" in r.json()["detail"], r.json()
    assert upload_mutants.stored_state() == before


def _wrong_model() -> bytes:
    """A model that loads but gives 5 scores a row, where task 1a has 10 classes."""
    weights = numpy_helper.from_array(np.zeros((3 * 32 * 32, 5), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Flatten", ["x"], ["rows"]), helper.make_node("MatMul", ["rows", "w"], ["scores"])],
        "wrong",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", 5])],
        [weights],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def onnx_mutants(model: bytes, rng: random.Random, count: int) -> list[tuple[str, bytes]]:
    """Damaged copies of an ONNX file: bits flipped and bytes replaced in its structure (its
    first and last 300 bytes: the weights in between are numbers, any of which loads),
    8 random bytes anywhere, truncations, and protobuf lengths declared huge."""
    out = []
    ends = (range(0, 300), range(len(model) - 300, len(model)))
    for i in range(count):
        at = rng.choice(rng.choice(ends))
        kind = i % 4
        body = bytearray(model)
        if kind == 0:
            body[at] ^= 1 << rng.randrange(8)
            what = f"bit flipped at byte {at}"
        elif kind == 1:
            body[at] = rng.randrange(256)
            what = f"byte {at} replaced"
        elif kind == 2:
            at = rng.randrange(len(model) - 8)
            body[at : at + 8] = rng.randbytes(8)
            what = f"8 random bytes at {at}"
        else:
            at = rng.randrange(len(model))
            body = body[:at]
            what = f"truncated to {at} bytes"
        out.append((what, bytes(body)))
    out += [
        ("groups nested 5,000 deep", b"\x0b" * 5000),
        ("a field declaring 2**60 bytes", b"\x3a" + b"\xff" * 8 + b"\x0f" + model[:50]),
        ("a truncated number", b"\x08" + b"\xff" * 20),
        ("a model that gives 5 scores a row", _wrong_model()),
    ]
    return out


def test_damaged_models_are_refused_never_a_500(make_run, monkeypatch):
    monkeypatch.setattr(model_auditing, "start", lambda job: None)  # no audit: the check only
    run = make_run(state=Run.STARTED, task=CIFAR, seed=SEED, test_examples=N)
    client = worker_client(run)
    r = post(client, run, _saved(_cifar_arrays(), compressed=False))
    assert r.status_code == 201, r.json()
    rng = random.Random(f"{FUZZ_SEED} model")
    valid = hostile_models.linear()
    corpus = onnx_mutants(valid, rng, 4) + [("an empty body", b"")]
    corpus += upload_mutants.random_bodies(rng)[1:2]

    def post_one(body: bytes):
        answer = post_model(client, run, body)
        if answer.status_code == 202:  # a model the damage left loadable: stored, so
            shutil.rmtree(model_files.folder(run.pk))  # removed (a run's model is
        return answer  # write-once: other bytes would be refused unread, with a 409)

    said = upload_mutants.fuzz(post_one, corpus, "model", taken=(202,))  # stored, audit pending
    assert upload_mutants.refused(said) >= len(corpus) // 2, said
    assert all(said[w] for w in said if w.startswith(("groups", "a field", "a truncated"))), said
    assert all(said[w] for w in ("an empty body", "a model that gives 5 scores a row")), said
    assert post_model(client, run, valid).status_code == 202  # still serving


CHECK_ALL = textwrap.dedent(
    """
    import json, resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    from mlbench_worker.shared.evaluation import model_audit
    contract = model_audit.Contract((3, 32, 32), 10)
    for path in sys.argv[1:]:
        data = open(path, "rb").read()
        try:
            model_audit.Model(data, contract)
            said = "loads"
        except model_audit.ModelRefused as exc:
            said = "refused: " + str(exc)
        except BaseException as exc:
            said = "error: " + type(exc).__name__ + ": " + str(exc)[:200]
        print(json.dumps([path, said]), flush=True)
    """
)


def test_the_model_check_refuses_any_damaged_model_with_model_refused(tmp_path):
    """model_audit.Model, what the check at POST runs in its child process: a damaged
    model is ModelRefused with a message, never another error (which the child would end
    with, and the master report as 'could not be checked')."""
    rng = random.Random(f"{FUZZ_SEED} onnx")
    corpus = onnx_mutants(hostile_models.linear(), rng, 160)
    paths = []
    for i, (_, body) in enumerate(corpus):
        paths.append(tmp_path / f"{i}.onnx")
        paths[-1].write_bytes(body)
    done = subprocess.run(
        [sys.executable, "-c", CHECK_ALL, *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,  # as the audit's child: nothing of the repository to read
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2])),
    )
    said = dict(json.loads(line) for line in done.stdout.splitlines() if line.startswith("["))
    assert done.returncode == 0 and len(said) == len(corpus), (
        f"the check ended with {done.returncode} after {len(said)} of {len(corpus)} models "
        f"(the next: {corpus[len(said)][0] if len(said) < len(corpus) else '-'}): "
        f"{done.stderr[-500:]}"
    )
    errors = {corpus[i][0]: said[str(p)] for i, p in enumerate(paths)}
    errors = {what: s for what, s in errors.items() if s.startswith("error")}
    assert not errors, errors
    refused = [s for s in said.values() if s.startswith("refused: ")]
    assert len(refused) > len(corpus) // 5  # the rest still load: left valid
    assert all(len(s) > len("refused: ") + 10 for s in refused)
