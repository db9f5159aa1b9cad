"""`mlbench run --gpu` against a live master: the request asks for the workers' GPUs
(gpu_enabled), and a master that offers none refuses it in its own words (exit 2), with
nothing stored. The GPU run itself is measured on a lent GPU (tests/benchmarks/bench_gpu.py,
docs/results.rst), not here: these machines have none."""

import pytest

from mlbench_worker.client.cli.master import EXIT_USAGE

from .test_algorithm_cli import _no_active_run

pytestmark = pytest.mark.mpi


def test_gpu_on_a_master_without_gpus_is_refused_naming_the_setting(master):
    _no_active_run(master)
    before = len(master.get("/api/runs/").json())
    done = master.cli("run", "on-gpus", "--workers", "1", "--cpus", "1", "--gpu")
    assert done.returncode == EXIT_USAGE, done.stdout + done.stderr
    assert "gpu_enabled" in done.stderr and "MLBENCH_MAX_GPUS=0" in done.stderr
    assert len(master.get("/api/runs/").json()) == before
