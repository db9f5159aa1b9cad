"""An algorithm written outside mlbench, against mlbench_worker/algorithms/public.py only, runs
in the reference loop (docs/algorithms.rst): loaded from a file, an installed module or the
master; refused at start-up naming what is wrong; ended with its name when it misbehaves."""

from __future__ import annotations

import ast
import hashlib
import http.server
import json
import os
from pathlib import Path

import pytest

from mlbench_worker.shared import result

from .helpers import REPO, mpirun, run_worker
from .helpers import metrics_file as _records
from .helpers import points as _points
from .recording_master import RecordingMaster

# Random-k sparsification with error feedback: every rank draws the same k indices from the
# run's seed, sends its error-corrected gradient there (one all-reduce of k values) and keeps
# the rest for later steps.
RANDK = """
import torch

from mlbench_worker.algorithms.public import Algorithm, Option

NAME = "randk"
API = 1
OPTIONS = (
    Option("density", "float", 0.25, "fraction of entries sent", above=0.0, maximum=1.0),
)


class RandK(Algorithm):
    def __init__(self, parts, options):
        super().__init__(parts, options)
        self.k = max(1, int(options["density"] * self.grads.numel))
        self.memory = torch.zeros(self.grads.numel)
        self.gen = torch.Generator().manual_seed(parts.seed)
        self.steps = 0

    def finish(self) -> float:
        self.steps += 1  # HOOK
        self.sum_scalars()
        g = self.grads.grads
        self.memory.add_(g)
        chosen = torch.randperm(g.numel(), generator=self.gen)[: self.k]
        values = self.memory[chosen].clone()
        self.memory[chosen] = 0.0
        self.wire.allreduce_(values)
        g.zero_()
        g[chosen] = values
        return 0.0
"""
TASK2 = ["-m", "mlbench_worker", "logreg-epsilon", "--dataset", "synthetic", "--target",
         "light", "--threads", "1", "--train-samples", "4000", "--test-samples", "1000",
         "--log-every", "4"]  # fmt: skip
FEATURES = 2000
STEPS_PER_EPOCH = 4000 // 2 // 128 + 1  # 2000 rows a rank in batches of 128, the last short


def _write(tmp_path: Path, source: str, name: str = "randk.py") -> Path:
    path = tmp_path / name
    path.write_text(source)
    return path


def _left_running(marker: str) -> list[str]:
    """Processes whose command line still names `marker` (this test's folder)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmd:
            found.append(f"{pid}: {cmd}")
    return found


@pytest.mark.mpi
def test_randk_from_a_file_reaches_task_2s_light_target_counted_by_the_trainer(tmp_path):
    out = tmp_path / "m.jsonl"
    path = _write(tmp_path, RANDK)
    proc = mpirun(2, [*TASK2, "--metrics-file", str(out), "--algorithm", str(path)], timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary, metrics = _records(out)
    assert summary["reached"], summary
    k = int(0.25 * (FEATURES + 1))
    assert summary["comm_bytes_per_step"] == 4 * k  # k fp32 values; the scalar slots free
    assert set(_points(metrics, "comm_bytes")) == {4 * k}
    assert not _points(metrics, "claimed_comm_bytes")  # it claims nothing
    # Bytes to target: the same count over every step up to the evaluation that reached it.
    assert summary["comm_bytes_to_target"] == 4 * k * round(summary["epochs"] * STEPS_PER_EPOCH)


def test_an_installed_module_loads(tmp_path):
    package = tmp_path / "lab_algos"
    package.mkdir()
    (package / "__init__.py").write_text("")
    _write(package, RANDK.replace('"randk"', '"randk-installed"'), "randk.py")
    out = tmp_path / "m.jsonl"
    proc = run_worker(
        [*TASK2[2:], "--metrics-file", str(out), "--algorithm", "lab_algos.randk",
         "--algorithm-option", "density=0.5"],
        PYTHONPATH=f"{REPO}{os.pathsep}{tmp_path}",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary, _ = _records(out)
    assert summary["reached"], summary
    # The record names the module's declared NAME, not its path, and the option typed.
    assert (summary["algorithm"], summary["algorithm_options"]) == ("randk-installed",
                                                                     {"density": 0.5})  # fmt: skip
    assert "algorithm_source" not in summary  # nothing was uploaded
    assert "randk-installed" in proc.stdout  # the headline names the module's NAME


class _Serving(RecordingMaster):
    """The recording master that also answers GET /api/algorithms/<sha>/ with `files`."""

    def __init__(self, files: dict[str, bytes]) -> None:
        super().__init__()
        self.files, self.gets = files, []

        handler = self.RequestHandlerClass

        def do_get(h: http.server.BaseHTTPRequestHandler) -> None:
            self.gets.append((h.path, h.headers.get("Authorization")))
            body = self.files.get(h.path.rstrip("/").split("/")[-1])
            h.send_response(200 if body is not None else 404)
            h.send_header("Content-Type", "text/x-python")
            h.end_headers()
            h.wfile.write(body or b"not found")

        handler.do_GET = do_get


def test_an_uploaded_file_is_fetched_with_the_run_token_and_its_hash_checked(tmp_path):
    source = RANDK.encode()
    sha = hashlib.sha256(source).hexdigest()
    master = _Serving({sha: source})
    try:
        proc = run_worker(
            [*TASK2[2:], "--algorithm", "randk", "--algorithm-source", sha,
             "--master-url", master.url, "--run-id", "7"],
            MLBENCH_RUN_TOKEN="tok-123",
        )  # fmt: skip
    finally:
        master.stop()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert master.gets == [(f"/api/algorithms/{sha}/", "Token tok-123")]
    # The summary it posted names the code that ran: NAME, the declared default, the hash.
    (posted,) = master.posted("summary")
    summary = json.loads(posted.body)
    assert summary["algorithm"] == "randk" and summary["algorithm_options"] == {"density": 0.25}
    assert summary["algorithm_source"] == sha and result.problems(summary) == {}


def test_a_file_whose_hash_differs_is_refused_before_it_is_read(tmp_path):
    evil = RANDK.replace("import torch", "import torch\nraise SystemExit('EVIL CODE RAN')").encode()
    sha = hashlib.sha256(RANDK.encode()).hexdigest()  # the master answers other bytes
    master = _Serving({sha: evil})
    try:
        proc = run_worker([*TASK2[2:], "--algorithm", "randk", "--algorithm-source", sha,
                           "--master-url", master.url, "--run-id", "7"])  # fmt: skip
    finally:
        master.stop()
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"has SHA-256 {hashlib.sha256(evil).hexdigest()}, not {sha}" in proc.stderr
    assert "EVIL CODE RAN" not in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "change,options,message",
    [
        (("def finish(self) -> float:", "def combine(self) -> float:"), [],
         "class RandK does not define finish"),
        (("API = 1", "API = 2"), [], "API version 2 is not supported"),
        (None, ["density=0.1", "rank=2"], "randk has no option 'rank'; its options: density"),
        (None, ["density=1.5"], "density must be more than 0 and at most 1, not '1.5'"),
        (("0.25, \"fraction", "2.5, \"fraction"), [],
         "option 'density': its default is refused by its own rules"),
    ],
)  # fmt: skip
def test_a_broken_algorithm_is_refused_at_start_up_by_name(tmp_path, change, options, message):
    source = RANDK.replace(*change) if change else RANDK
    path = _write(tmp_path, source)
    extra = [x for o in options for x in ("--algorithm-option", o)]
    proc = run_worker([*TASK2[2:], "--algorithm", str(path), *extra], timeout=60)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert message in proc.stderr, proc.stderr[-2000:]
    assert "randk.py" in proc.stderr  # the module is named
    assert "Traceback" not in proc.stderr


def test_a_module_that_is_not_installed_is_named():
    proc = run_worker([*TASK2[2:], "--algorithm", "nowhere_lab.algo"], timeout=60)
    assert proc.returncode == 2 and "module nowhere_lab.algo" in proc.stderr, proc.stderr


MISBEHAVIOURS = {
    "raises": ("self.steps += 1  # HOOK",
               "self.steps += 1\n        if self.steps == 3:\n            raise ValueError('bad k')",
               "algorithm randk raised in finish() at step 3"),
    "deadlock": ("self.wire.allreduce_(values)",
                 "if self.comm.rank == 0 and self.steps >= 2:\n"
                 "            self.wire.allreduce_(self.memory)\n"
                 "        self.wire.allreduce_(values)",
                 "algorithm randk"),
    "sizes": ("values = self.memory[chosen].clone()",
              "values = self.memory[chosen].clone()\n"
              "        if self.comm.rank == 1 and self.steps >= 2:\n"
              "            values = self.memory.clone()",
              "algorithm randk"),
}  # fmt: skip


@pytest.mark.mpi
@pytest.mark.parametrize("case", sorted(MISBEHAVIOURS))
def test_a_misbehaving_algorithm_ends_the_run_with_its_name(tmp_path, case):
    old, new, message = MISBEHAVIOURS[case]
    assert old in RANDK
    path = _write(tmp_path, RANDK.replace(old, new))
    proc = mpirun(2, [*TASK2, "--algorithm", str(path), "--algorithm-stall-seconds", "3"],
                  timeout=90)  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert message in proc.stderr, out[-3000:]
    if case == "raises":
        assert "randk.py, line" in proc.stderr and "ValueError: bad k" in proc.stderr
    assert not _left_running(str(tmp_path))


@pytest.mark.mpi
def test_a_claim_below_the_measured_bytes_is_reported_and_not_used(tmp_path):
    lying = RANDK + "\n    claimed_bytes = 8\n"
    out = tmp_path / "m.jsonl"
    path = _write(tmp_path, lying)
    proc = mpirun(2, [*TASK2, "--metrics-file", str(out), "--algorithm", str(path)], timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary, metrics = _records(out)
    k = int(0.25 * (FEATURES + 1))
    assert summary["comm_bytes_per_step"] == 4 * k  # measured wins
    assert set(_points(metrics, "claimed_comm_bytes")) == {8}
    assert f"claims 8 bytes/step; the trainer measured {4 * k:,}" in proc.stdout


def _mlbench_imports(source: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return {m for m in found if m.split(".")[0].startswith("mlbench")}


def test_public_is_the_only_mlbench_module_algorithms_import():
    assert _mlbench_imports(RANDK) == {"mlbench_worker.algorithms.public"}
    diloco = REPO / "mlbench_worker" / "algorithms" / "diloco.py"
    if diloco.exists():
        assert _mlbench_imports(diloco.read_text()) == {"mlbench_worker.algorithms.public"}
