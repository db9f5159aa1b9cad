"""Shared bits of the worker tests: where mpirun is, and CIFAR-format files written small."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np

from mlbench_master.cluster.mpirun import launcher_argv
from mlbench_master.cluster.transient import says_listener_failed

MPIRUN = os.path.join(os.path.dirname(sys.executable), "mpirun")
REPO = Path(__file__).resolve().parents[2]
# `python -c RANK_BODY_SPY ARGS` runs mlbench_worker as `python -m mlbench_worker ARGS` would,
# and prints `RANK_BODY <class>` each time a rank enters the one rank body
# (training/rank_body.run), naming the implementation class it was handed.
RANK_BODY_SPY = (
    "import runpy\n"
    "from mlbench_worker.training import rank_body\n"
    "body = rank_body.run\n"
    "def spy(config, implementation):\n"
    "    kind = type(implementation)\n"
    "    print('RANK_BODY', kind.__module__ + '.' + kind.__qualname__, flush=True)\n"
    "    return body(config, implementation)\n"
    "rank_body.run = spy\n"
    "runpy.run_module('mlbench_worker', run_name='__main__', alter_sys=True)\n"
)


def rank_body_entries(stdout: str) -> list[str]:
    """The implementation classes the ranks of a RANK_BODY_SPY run handed to the body."""
    return [line.split()[1] for line in stdout.splitlines() if line.startswith("RANK_BODY ")]


# Options of every JVM a test's short Spark run starts, through Spark's own settings: the
# cluster's master and workers (SPARK_DAEMON_JAVA_OPTS), the application's driver and
# executors (pyspark's submit arguments); a run's ranks hand their environment to all of
# them. C1 only and the serial collector: these JVMs live a minute or two, and on 2 cores
# C2's compilations and the parallel collector's threads cost more than they win back
# (measured in test_spark_run.py). What the runs compute is the same. Not JAVA_TOOL_OPTIONS:
# every JVM announces it on stderr, `java -version` too, whose first line a summary records.
FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
SPARK_JVM_ENV = {
    "SPARK_DAEMON_JAVA_OPTS": FAST_JVM,
    "PYSPARK_SUBMIT_ARGS": f"--driver-java-options '{FAST_JVM}' "
    f"--conf 'spark.executor.extraJavaOptions={FAST_JVM}' pyspark-shell",
}

# The same options for every JVM of a short Flink run: its cluster's JobManager and
# TaskManagers and the client's gateway read them from the configuration the ranks write
# (implementations/flink/flink_cluster.py, MLBENCH_FLINK_JAVA_OPTS).
FLINK_JVM_ENV = {"MLBENCH_FLINK_JAVA_OPTS": FAST_JVM}
# The flink implementation's own Python (make test-deps: .venv-flink), as the master names it.
FLINK_PYTHON = os.environ.get("MLBENCH_FLINK_PYTHON") or str(
    REPO / ".venv-flink" / "bin" / "python"
)


def have_flink() -> bool:
    """Whether the flink implementation's Python has pyflink, and Java is here."""
    import shutil

    if not os.path.exists(FLINK_PYTHON) or shutil.which("java") is None:
        return False
    probe = subprocess.run(
        [
            FLINK_PYTHON,
            "-c",
            "import importlib.util, sys; sys.exit(importlib.util.find_spec('pyflink') is None)",
        ],
        capture_output=True,
        timeout=60,
    )
    return probe.returncode == 0


def worker_env(**extra: str) -> dict:
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env["PYTHONPATH"] = str(REPO)
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("MLBENCH_MASTER_URL", None)
    env.pop("MLBENCH_RUN_ID", None)
    env.update(extra)
    return env


def mpirun(
    n: int, args: list[str], timeout: float = 240, python: str = sys.executable, **env: str
) -> subprocess.CompletedProcess:
    """Run `python ARGS` on n ranks with real mpirun (oversubscribed, unbound, 1 thread each);
    `python`: the ranks' interpreter (this one unless an implementation has its own).

    The prefix is the product's (`launcher_argv`), untagged (the tests read the ranks' lines
    as printed) and without -x (local ranks get mpirun's environment, `worker_env`)."""
    launcher = launcher_argv(n, mpirun=MPIRUN, tag_output=False, forward=())
    cmd = [*launcher, python, *args]
    for _ in range(2):
        done = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=worker_env(OMP_NUM_THREADS="1", **env),
        )
        # Open MPI's launcher now and then cannot open its PMIx listener and stops before
        # any rank started (the product's rule, cluster/transient.py): nothing the test
        # checks ran, so it is launched once more, as the run job does.
        if done.returncode == 0 or not says_listener_failed(done.stdout + done.stderr):
            break
    return done


def mpi_result(proc: subprocess.CompletedProcess) -> dict:
    """What a check script run under mpirun printed as `RESULT <json>` (rank 0), after
    asserting that mpirun succeeded (its output is the assertion's message)."""
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def run_worker(
    args: list[str], timeout: float = 120, python: str = sys.executable, **env: str
) -> subprocess.CompletedProcess:
    """`python -m mlbench_worker ARGS` as one process, without mpirun."""
    return subprocess.run(
        [python, "-m", "mlbench_worker", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=worker_env(OMP_NUM_THREADS="1", **env),
    )


def write_batch(path: Path, images: np.ndarray, labels: list[int]) -> None:
    """A batch file as the official archive has them: a protocol-2 pickle with bytes keys."""
    record = {
        b"batch_label": b"test batch",
        b"labels": labels,
        b"data": images.reshape(len(labels), 3072),
        b"filenames": [f"img{i}.png".encode() for i in range(len(labels))],
    }
    path.write_bytes(pickle.dumps(record, protocol=2))


def make_cifar_folder(root: Path, per_batch: int = 20, seed: int = 0) -> Path:
    """A small cifar-10-batches-py folder in the real format; returns the folder."""
    rng = np.random.default_rng(seed)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        images = rng.integers(0, 256, size=(per_batch, 3, 32, 32), dtype=np.uint8)
        write_batch(folder / name, images, [int(v) for v in rng.integers(0, 10, per_batch)])
    meta = {
        b"label_names": [
            b"airplane",
            b"automobile",
            b"bird",
            b"cat",
            b"deer",
            b"dog",
            b"frog",
            b"horse",
            b"ship",
            b"truck",
        ],
        b"num_vis": 3072,
    }
    (folder / "batches.meta").write_bytes(pickle.dumps(meta, protocol=2))
    return folder


def file_md5s(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.md5(p.read_bytes()).hexdigest() for p in folder.iterdir()}


def make_archive(folder: Path, archive: Path) -> str:
    """tar.gz `folder` like the official archive; returns the archive's MD5."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(folder, arcname="cifar-10-batches-py")
    archive.write_bytes(buf.getvalue())
    return hashlib.md5(buf.getvalue()).hexdigest()


def metrics_file(path: Path) -> tuple[dict, list[dict]]:
    """A --metrics-file's last summary and its other records (metric points)."""
    records = [json.loads(line) for line in path.read_text().splitlines()]
    summary = [r for r in records if r["type"] == "summary"][-1]
    return summary, [r for r in records if r["type"] != "summary"]


def points(metrics: list[dict], name: str) -> list[float]:
    """The values of metric `name`, in the order they were written."""
    return [m["value"] for m in metrics if m["name"] == name]


GRADED = ("val_accuracy", "val_top5_accuracy")  # what the run reports and the evaluator grades


def assert_graded_as_reported(folder: Path, metrics: list[dict], evaluator: object) -> int:
    """Every evaluation the run reported (its `val_accuracy` points, and `val_top5_accuracy`
    where it has them) has a predictions file in `folder`, with the same step, epoch and
    clock, and the evaluator grades it as the run reported it (to float rounding: ranks sum
    their hits in float32 under TensorFlow). Returns how many files were graded."""
    import pytest

    from mlbench_worker.shared.evaluation.predictions import files_in

    reported: dict[int, dict] = {}
    meta: dict[int, dict] = {}
    for m in metrics:
        if m.get("name") in GRADED:
            reported.setdefault(m["metadata"]["step"], {})[m["name"]] = m["value"]
            meta[m["metadata"]["step"]] = m["metadata"]
    grades = {g.step: g for g in map(evaluator.grade, files_in(folder))}  # type: ignore[attr-defined]
    assert reported and sorted(grades) == sorted(reported), (sorted(grades), sorted(reported))
    for step, values in reported.items():
        grade = grades[step]
        assert grade.metrics == pytest.approx(values, abs=1e-6), (step, grade, values)
        assert (grade.epoch, grade.elapsed) == (meta[step]["epoch"], meta[step]["elapsed"])
    return len(grades)
