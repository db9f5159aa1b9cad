"""A posted model is a program: the evaluator refuses one whose tensors live in other files,
wherever they hide, and runs the rest in a child process whose time and memory are bounded,
so a model that loops or allocates without end costs a verdict, not the master."""

from __future__ import annotations

import pytest
import torch

from mlbench_worker.shared.evaluation import audit_process, onnx_external
from mlbench_worker.shared.evaluation.model_audit import Contract, Model, ModelRefused
from mlbench_worker.shared.evaluation.test_sets import TestSet
from mlbench_worker.training.torch_export import onnx_bytes
from tests.evaluation import hostile_models

CIFAR = Contract((3, 32, 32), 10)
TEST_SET = TestSet("resnet20-cifar10", "synthetic", 3, 500)


def test_tensors_kept_in_other_files_are_found_wherever_they_hide():
    find = onnx_external.external_tensors
    assert find(hostile_models.external_weights("README.rst")) == ["'w' (in 'README.rst')"]
    assert find(hostile_models.external_elsewhere(".env", "constant")) == ["'hidden' (in '.env')"]
    # Both branches of the If hold it: found in each.
    assert (
        find(hostile_models.external_elsewhere("db.sqlite3", "subgraph"))
        == ["'hidden' (in 'db.sqlite3')"] * 2
    )
    assert find(hostile_models.linear()) == []
    linear = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, 10))
    assert find(onnx_bytes(linear, torch.zeros(2, 3, 32, 32))) == []  # an exporter's file
    with pytest.raises(onnx_external.Broken, match="wire type 7 at byte 4"):
        find(b"\x08\x07 not a model at all")


def test_a_model_with_external_data_is_refused_before_onnxruntime_reads_it(tmp_path, monkeypatch):
    # The file is there and holds the right bytes: onnxruntime would load the model.
    (tmp_path / "weights.bin").write_bytes(hostile_models.WEIGHTS.tobytes())
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelRefused, match=r"keeps the data of tensor 'w' \(in 'weights.bin'\)"):
        Model(hostile_models.external_weights("weights.bin"), CIFAR)
    with pytest.raises(ModelRefused, match="'hidden' \\(in 'weights.bin'\\) in another file"):
        Model(hostile_models.external_elsewhere("weights.bin", "subgraph"), CIFAR)


def _check(tmp_path, data: bytes, limits: audit_process.Limits) -> dict:
    path = tmp_path / "model.onnx"
    path.write_bytes(data)
    return audit_process.run(audit_process.request_of(TEST_SET, mode="check", model=path), limits)


def test_a_model_that_never_ends_is_refused_over_the_time_limit(tmp_path):
    answer = _check(tmp_path, hostile_models.looping(38), audit_process.Limits(3, 2048))
    assert answer == {"refused": "the model ran over 3 s (MLBENCH_AUDIT_TIMEOUT)"}


def test_a_model_that_allocates_without_end_is_refused_over_the_memory_cap(tmp_path):
    answer = _check(tmp_path, hostile_models.allocating(), audit_process.Limits(60, 1024))
    assert answer["refused"].startswith("the model needed over 1024 MiB (MLBENCH_AUDIT_MEMORY_MIB)")
    honest = _check(tmp_path, hostile_models.linear(), audit_process.Limits(60, 1024))
    assert set(honest) == {"sha256"}  # checked: it fits the contract


def test_a_child_that_fails_without_an_answer_is_said_so(tmp_path):
    with pytest.raises(audit_process.Failed, match="exited with code 1: KeyError: 'model'"):
        audit_process.run({"mode": "check"}, audit_process.Limits(60, 1024))


def test_a_child_left_alone_stops_by_its_own_cpu_limit(tmp_path):
    """Were its master killed during an audit, nobody would kill a looping child: it caps
    its own CPU time at the time limit (plus a second), and the kernel ends it."""
    import json
    import signal
    import subprocess
    import sys

    path = tmp_path / "model.onnx"
    path.write_bytes(hostile_models.looping(38))
    request = audit_process.request_of(TEST_SET, mode="check", model=path)
    done = subprocess.run(
        [sys.executable, "-m", audit_process.__name__, "1024", "1"],
        input=json.dumps(request), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == -signal.SIGXCPU, done.stderr[-2000:]
