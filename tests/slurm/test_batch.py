"""What the driver asks of Slurm for a run: the sbatch options built from the run and from
every MLBENCH_SLURM_* setting, as the master reads them (Django's settings). No Slurm is
needed to build them; the live runs (test_runs.py, test_settings.py) check that Slurm got
them, through squeue --json.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from mlbench_master.cluster.base import ClusterError, RunSpec
from mlbench_master.cluster.slurm.batch import batch_script, sbatch_options
from mlbench_master.cluster.slurm.config import load_config


@pytest.fixture
def slurm_settings(settings, tmp_path):
    """No site setting at all (whatever the environment says), files under tmp_path."""
    for name in ("PARTITION", "ACCOUNT", "QOS", "SBATCH_OPTIONS", "GRES", "SETUP"):
        setattr(settings, f"MLBENCH_SLURM_{name}", "")
    settings.MLBENCH_SLURM_DIR = str(tmp_path / "slurm")
    return settings


def _files(run_id: int, folder: Path) -> list[str]:
    """The options every job gets: its folder, output, no requeue, the run named."""
    return [
        f"--chdir={folder}",
        f"--output={folder / 'stdout.log'}",
        f"--error={folder / 'stderr.log'}",
        "--open-mode=append",
        "--no-requeue",
        "--export=ALL",
        f"--comment=mlbench run {run_id}",
    ]


def test_every_setting_and_run_field_reaches_sbatch(slurm_settings, tmp_path):
    slurm_settings.MLBENCH_SLURM_PARTITION = " gpu "
    slurm_settings.MLBENCH_SLURM_ACCOUNT = "proj42"
    slurm_settings.MLBENCH_SLURM_QOS = "short"
    slurm_settings.MLBENCH_SLURM_GRES = "gpu:a100:1"
    slurm_settings.MLBENCH_SLURM_SBATCH_OPTIONS = "--mem=64G --constraint='a100 & ib'"
    config = load_config()
    folder = tmp_path / "run-12"
    run = RunSpec(id=12, num_workers=3, num_cpus=2.5, gpu_enabled=True, time_limit=301)
    options = sbatch_options(config, run, folder)
    assert options == [
        f"--job-name=mlbench-{config.tag}-run-12",
        "--nodes=3",
        "--ntasks=3",
        "--ntasks-per-node=1",  # one worker a node
        "--cpus-per-task=3",  # 2.5 CPUs: Slurm allocates whole ones
        "--time=6",  # 301 s: Slurm counts whole minutes, rounded up
        *_files(12, folder),
        "--gres=gpu:a100:1",
        "--partition=gpu",
        "--account=proj42",
        "--qos=short",
        # The site's own options come last, so they win over the driver's.
        "--mem=64G",
        "--constraint=a100 & ib",
    ]


def test_no_setting_asks_for_nothing_beyond_the_run(slurm_settings, tmp_path):
    config = load_config()
    folder = tmp_path / "run-5"
    run = RunSpec(id=5, num_workers=2, num_cpus=0.5, gpu_enabled=False, time_limit=60)
    options = sbatch_options(config, run, folder)
    assert options == [
        f"--job-name=mlbench-{config.tag}-run-5",
        "--nodes=2",
        "--ntasks=2",
        "--ntasks-per-node=1",
        "--cpus-per-task=1",  # never 0
        "--time=1",
        *_files(5, folder),
    ]
    assert not any(o.startswith(("--gres", "--partition", "--account", "--qos")) for o in options)


def test_jobs_of_two_masters_have_names_of_their_own(slurm_settings, tmp_path):
    first = load_config()
    slurm_settings.MLBENCH_SLURM_DIR = str(tmp_path / "other")
    second = load_config()
    assert first.job_name(3) != second.job_name(3)
    assert first.job_name(3).endswith("-run-3") and second.job_name(3).endswith("-run-3")


def test_sbatch_options_that_cannot_be_split_name_the_setting(slurm_settings):
    slurm_settings.MLBENCH_SLURM_SBATCH_OPTIONS = "--constraint='a100"
    with pytest.raises(ClusterError, match="MLBENCH_SLURM_SBATCH_OPTIONS cannot be split"):
        load_config()


def test_the_batch_script_runs_the_setup_then_the_command_and_records_its_code(
    slurm_settings, tmp_path
):
    """Run with bash as Slurm runs it (a folder with a space in its name): the setup runs
    first, the command in the job's folder, and its exit code is recorded and returned."""
    slurm_settings.MLBENCH_SLURM_SETUP = "export SITE_SETUP=done\n"
    config = load_config()
    folder = tmp_path / "run 7"
    folder.mkdir()
    command = 'echo "$SITE_SETUP in $PWD" > seen.txt; exit 3'
    script = folder / "job.sh"
    script.write_text(batch_script(config, ["bash", "-c", command], folder))
    done = subprocess.run(["bash", str(script)], cwd=tmp_path, timeout=30, check=False)
    assert done.returncode == 3
    assert (folder / "seen.txt").read_text() == f"done in {folder}\n"
    assert (folder / "exit_code").read_text() == "3\n"
    assert not (folder / "exit_code.tmp").exists()
