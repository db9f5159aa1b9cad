"""The Slurm driver's settings (MLBENCH_SLURM_*, SLURM_CONF), read with
cluster.environment.setting so a bare driver in a script reads the environment.

One frozen object, read once per driver: every command the driver runs and every batch
script it writes use the same values, so what was submitted can be explained afterwards.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from mlbench_master.cluster.base import ClusterError
from mlbench_master.cluster.environment import setting
from mlbench_worker.shared.home import mlbench_home

LAUNCHERS = ("mpirun", "srun")


@dataclass(frozen=True)
class SlurmConfig:
    """What the driver submits with and where the jobs' files live.

    `directory` must be on a filesystem the compute nodes and the master share: the batch
    scripts, the ranks' output and checkpoints are written there by the nodes and read by
    the master. `mpirun_options` go before the worker command: by default Open MPI's
    `--leave-session-attached`, which keeps mpirun's daemons in the job's process tree (a
    daemon that detaches escapes Slurm's process tracking on clusters that track by
    parent process, and outlives a cancel by seconds); with the srun launcher their `--mca`
    options become OMPI_MCA_* variables (mpirun.mca_environment), the rest do not apply.
    `srun_mpi` is srun's --mpi plugin: pmix by default, because Open MPI 5 (the worker
    extra's MPI) has no PMI-2 and under pmi2 each of its ranks is a world of one. `setup` is
    shell text run at the top of every batch script (module loads, a virtualenv, Open MPI's
    transport on one host). `slurm_conf` empty: Slurm's own rule (the SLURM_CONF of the
    environment, else its compiled-in default).
    """

    partition: str = ""
    account: str = ""
    qos: str = ""
    extra_options: tuple[str, ...] = ()
    gres_per_gpu: str = "gpu:1"
    launcher: str = "mpirun"
    srun_mpi: str = "pmix"
    python: str = ""
    mpirun: str = ""
    mpirun_options: tuple[str, ...] = ("--leave-session-attached",)
    setup: str = ""
    directory: str = ""
    slurm_conf: str = ""
    bin_dir: str = ""

    @property
    def tag(self) -> str:
        """A short name for this master's jobs (several masters may share one cluster)."""
        return hashlib.sha1(self.directory.encode()).hexdigest()[:6]

    def job_name(self, run_id: int | str) -> str:
        return f"mlbench-{self.tag}-run-{run_id}"

    def program(self, name: str) -> str:
        """A Slurm tool by name, from MLBENCH_SLURM_BIN when set, else PATH."""
        return str(Path(self.bin_dir) / name) if self.bin_dir else name

    def environment(self) -> dict[str, str]:
        """The environment Slurm's tools run with (SLURM_CONF honoured)."""
        env = dict(os.environ)
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        return env


def _home() -> Path:
    value = setting("MLBENCH_HOME")
    if value:
        return Path(value).expanduser()

    return mlbench_home()


def load_config() -> SlurmConfig:
    """The settings as they are now; ClusterError names a setting that cannot work."""
    launcher = (setting("MLBENCH_SLURM_LAUNCHER") or "mpirun").strip()
    if launcher not in LAUNCHERS:
        raise ClusterError(
            f"MLBENCH_SLURM_LAUNCHER={launcher!r} is not a launcher; use 'mpirun' (mpirun inside "
            "the allocation) or 'srun' (srun --mpi=MLBENCH_SLURM_MPI)"
        )
    extra = setting("MLBENCH_SLURM_SBATCH_OPTIONS") or ""
    try:
        extra_options = tuple(shlex.split(extra))
    except ValueError as exc:
        raise ClusterError(f"MLBENCH_SLURM_SBATCH_OPTIONS cannot be split: {exc}") from exc
    mpirun_words = setting("MLBENCH_SLURM_MPIRUN_OPTIONS")
    try:
        mpirun_options = tuple(shlex.split(mpirun_words)) if mpirun_words is not None else None
    except ValueError as exc:
        raise ClusterError(f"MLBENCH_SLURM_MPIRUN_OPTIONS cannot be split: {exc}") from exc
    mpirun = setting("MLBENCH_SLURM_MPIRUN") or ""
    if not mpirun:
        beside = Path(sys.executable).parent / "mpirun"
        mpirun = str(beside) if beside.exists() else (shutil.which("mpirun") or "mpirun")
    return SlurmConfig(
        partition=(setting("MLBENCH_SLURM_PARTITION") or "").strip(),
        account=(setting("MLBENCH_SLURM_ACCOUNT") or "").strip(),
        qos=(setting("MLBENCH_SLURM_QOS") or "").strip(),
        extra_options=extra_options,
        gres_per_gpu=(setting("MLBENCH_SLURM_GRES") or "gpu:1").strip(),
        launcher=launcher,
        # pmix: the worker extra's Open MPI 5 speaks only PMIx (under pmi2 each rank is alone)
        srun_mpi=(setting("MLBENCH_SLURM_MPI") or "pmix").strip(),
        python=setting("MLBENCH_SLURM_PYTHON") or sys.executable,
        mpirun=mpirun,
        mpirun_options=mpirun_options if mpirun_options is not None else SlurmConfig.mpirun_options,
        setup=setting("MLBENCH_SLURM_SETUP") or "",
        directory=setting("MLBENCH_SLURM_DIR") or str(_home() / "slurm"),
        slurm_conf=setting("SLURM_CONF") or "",
        bin_dir=setting("MLBENCH_SLURM_BIN") or "",
    )
