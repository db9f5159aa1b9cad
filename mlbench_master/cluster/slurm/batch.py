"""A run as a Slurm job: its sbatch options and its batch script.

One job a run: `num_workers` nodes with one task each and `num_cpus` CPUs per task (GPUs
through --gres), the run's time limit (Slurm counts whole minutes, so it is rounded up;
the run job enforces the exact seconds), and the site's partition, account, QoS and extra
options. The script runs the command cluster/mpirun.py built, inside the allocation
(Open MPI's mpirun reads the allocation's nodes from Slurm and starts its daemons with
srun), writes its output beside itself and records mpirun's exit code when it ends, so a
master that was down meanwhile still learns how the run ended.
"""

from __future__ import annotations

import math
import os
import shlex
from pathlib import Path

from mlbench_master.cluster.base import RunSpec
from mlbench_master.cluster.slurm.config import SlurmConfig


def cpus_per_task(run: RunSpec) -> int:
    """Whole CPUs for a rank that may use `num_cpus` (Slurm allocates whole CPUs)."""
    return max(1, math.ceil(run.num_cpus))


def time_limit_minutes(seconds: int) -> int:
    return max(1, math.ceil(int(seconds) / 60))


def sbatch_options(config: SlurmConfig, run: RunSpec, directory: Path) -> list[str]:
    """The sbatch options for `run`, its files in `directory`."""
    options = [
        f"--job-name={config.job_name(run.id)}",
        f"--nodes={run.num_workers}",
        f"--ntasks={run.num_workers}",
        "--ntasks-per-node=1",
        f"--cpus-per-task={cpus_per_task(run)}",
        f"--time={time_limit_minutes(run.time_limit)}",
        f"--chdir={directory}",
        f"--output={directory / 'stdout.log'}",
        f"--error={directory / 'stderr.log'}",
        "--open-mode=append",
        "--no-requeue",
        "--export=ALL",
        f"--comment=mlbench run {run.id}",
    ]
    if run.gpu_enabled:
        options.append(f"--gres={config.gres_per_gpu}")
    if config.partition:
        options.append(f"--partition={config.partition}")
    if config.account:
        options.append(f"--account={config.account}")
    if config.qos:
        options.append(f"--qos={config.qos}")
    return options + list(config.extra_options)


def batch_script(config: SlurmConfig, argv: list[str], directory: Path) -> str:
    """The batch script: the site's set-up, then `argv`, then its exit code recorded
    atomically (exit_code), as the local driver's wrapper does."""
    code_file = shlex.quote(str(directory / "exit_code"))
    python_dir = shlex.quote(str(Path(config.python).parent))
    lines = [
        "#!/bin/bash",
        "# Written by mlbench's Slurm driver; Slurm runs it on the job's first node.",
        f'export PATH={python_dir}:"$PATH"',
        "unset DJANGO_SETTINGS_MODULE",
        config.setup.strip(),
        f"cd {shlex.quote(str(directory))} || exit 1",
        shlex.join(argv),
        "code=$?",
        f'echo "$code" > {code_file}.tmp && mv {code_file}.tmp {code_file}',
        'exit "$code"',
    ]
    return "\n".join(line for line in lines if line) + "\n"


# The master's own secrets and Django's settings never go into a job's environment (Slurm
# keeps a job's environment in its state files); the ranks get what the job adds.
_PRIVATE = (
    "DATABASE_URL", "REDIS_URL", "MLBENCH_SECRET_KEY", "MLBENCH_SIGNING_KEY",
    "DJANGO_SETTINGS_MODULE",
)  # fmt: skip
_PRIVATE_WORDS = ("PASSWORD", "SECRET", "TOKEN")


def job_environment(env: dict[str, str]) -> dict[str, str]:
    """The environment sbatch gives the job: the master's, less its secrets, plus `env`
    (the run's own variables, its worker token among them)."""
    kept = {
        name: value
        for name, value in os.environ.items()
        if name not in _PRIVATE and not any(word in name.upper() for word in _PRIVATE_WORDS)
    }
    return {**kept, **env}
