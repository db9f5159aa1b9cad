"""SlurmCluster (MLBENCH_CLUSTER=slurm): a run is one Slurm job, its ranks started inside
the allocation by the command cluster/mpirun.py builds.

Why it is shaped like this:

- Slurm decides where and when the workers run, so `prepare` only checks that the
  partition can ever hold the run and returns no hosts: mpirun reads the allocation's
  nodes from Slurm itself (or, with MLBENCH_SLURM_LAUNCHER=srun, srun starts the ranks).
- Everything a later master needs is in the launch record (`slurm`: job id, folder) and
  in the job's folder on the shared filesystem (output, exit code, offsets), so a master
  restart re-attaches to a running job and settles one that ended meanwhile.
- `cancel` is scancel, and returns once Slurm says the job's processes are gone. Jobs are
  named per master (config.job_name), so left-overs of ended runs are found and stopped.
- Bandwidth and latency are not shaped: the nodes' links are the site's; the record says so.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

from mlbench_master.cluster import node_kinds
from mlbench_master.cluster.base import (
    CannotAttach,
    ClusterDriver,
    ClusterError,
    Execution,
    PodInfo,
    PodSample,
    RunSpec,
)
from mlbench_master.cluster.environment import setting
from mlbench_master.cluster.followed import rank_ends_folder
from mlbench_master.cluster.mpirun import RANK_ENDS_VARIABLE, srun_argv
from mlbench_master.cluster.python_probe import python_has_module
from mlbench_master.cluster.slurm import batch, commands, nodes
from mlbench_master.cluster.slurm.config import SlurmConfig, load_config
from mlbench_master.cluster.slurm.execution import SlurmExecution, stop_job

NOT_SHAPED = (
    "the Slurm driver does not shape the nodes' network: the links between nodes are the "
    "site's (the run measures them as they are)"
)


class PartitionUnusable(ClusterError):
    """The settings name no partition Slurm has (or Slurm has no default one): the master's
    problem, said at start and on the Workers page, and by every run's job."""


class SlurmCluster(ClusterDriver):
    """`MLBENCH_CLUSTER=slurm`: one Slurm job a run."""

    name = "slurm"

    def __init__(self, config: SlurmConfig | None = None) -> None:
        self.config = config or load_config()

    @property
    def mpirun_options(self) -> tuple[str, ...]:  # type: ignore[override]
        return self.config.mpirun_options

    @property
    def mpirun(self) -> str:
        return self.config.mpirun

    @property
    def python(self) -> str:
        return self.config.python

    def has_module(self, module: str, python: str | None = None) -> bool | None:
        # Only a Python the master can run itself (a shared filesystem) can be asked.
        python = python or self.python
        if not Path(python).exists():
            return None
        return python_has_module(python, module)

    # -- the partition
    def _partition(self) -> tuple[str, list[commands.NodeInfo]]:
        """The partition runs go to and its nodes; PartitionUnusable when the settings name
        none Slurm has."""
        parts = commands.partitions(self.config)
        name = self.config.partition or parts.get("*", "")
        if not name:
            raise PartitionUnusable(
                "Slurm has no default partition: set MLBENCH_SLURM_PARTITION to one of "
                + (", ".join(sorted(p for p in parts if p != "*")) or "(none)")
            )
        if name not in parts:
            raise PartitionUnusable(
                f"MLBENCH_SLURM_PARTITION={name!r}: Slurm has no such partition; it has "
                + (", ".join(sorted(p for p in parts if p != "*")) or "none")
            )
        return name, [n for n in commands.nodes(self.config) if name in n.partitions]

    def problems(self) -> list[str]:
        try:
            name, members = self._partition()
        except ClusterError as exc:
            return [str(exc)]
        if not members:
            return [f"Slurm partition {name} has no nodes"]
        up = [n for n in members if nodes.phase(n) in ("Idle", "Running")]
        if not up:
            states = ", ".join(f"{n.name} {n.state}" for n in members)
            return [f"no node of Slurm partition {name} can run a job now ({states})"]
        return []

    def check_workers(self, num_workers: int) -> None:
        try:
            self._check_size(num_workers, None)
        except (commands.SlurmUnavailable, PartitionUnusable):
            # Unreachable now, or the master's settings: not the request's fault (no 400 on
            # num_workers); the run's job says why if it stays so.
            return

    def check_cpus(self, num_cpus: float) -> None:
        try:
            self._check_size(None, num_cpus)
        except (commands.SlurmUnavailable, PartitionUnusable):
            return

    def _check_size(self, num_workers: int | None, num_cpus: float | None) -> None:
        """ClusterError when the partition can never hold the request; SlurmUnavailable
        when Slurm cannot be asked."""
        name, members = self._partition()
        if num_workers is not None and num_workers > len(members):
            raise ClusterError(
                f"num_workers is {num_workers} but Slurm partition {name} has {len(members)} "
                f"node{'s' if len(members) != 1 else ''} (one worker a node); ask for at most "
                f"{len(members)}"
            )

        most = max((n.cpus for n in members), default=0)
        wanted = batch.cpus_per_task(RunSpec(id=0, num_cpus=num_cpus or 1))
        if num_cpus is not None and wanted > most:
            raise ClusterError(
                f"num_cpus is {num_cpus:g} but the nodes of Slurm partition {name} have at most "
                f"{most} CPUs; ask for at most {most}"
            )

    def _partition_name(self) -> str:
        """The partition runs go to: the setting, else Slurm's default ("" if unknown)."""
        if self.config.partition:
            return self.config.partition
        try:
            return commands.partitions(self.config).get("*", "")
        except ClusterError:
            return ""

    def pods(self) -> list[PodInfo]:
        name = self.config.partition or commands.partitions(self.config).get("*", "")
        return nodes.pods(commands.nodes(self.config), commands.jobs(self.config), name)

    def prepare(self, run: RunSpec) -> list[str]:
        # Unlike the API's checks, an unreachable Slurm fails the run here, with the reason.
        self._check_size(run.num_workers, run.num_cpus)
        if run.gpu_enabled:
            _name, members = self._partition()
            if not any(n.gpus for n in members):
                raise ClusterError("the run asks for GPUs but no node of its partition has any")
        Path(self.config.directory).mkdir(parents=True, exist_ok=True)
        return []  # the allocation's nodes are known only inside the job

    def launch(self, run: RunSpec, argv: list[str], env: dict[str, str]) -> Execution:
        config = self.config
        if config.launcher == "srun":
            argv = srun_argv(
                run,
                srun=config.program("srun"),
                mpi=config.srun_mpi,
                python=self.python_for(run.implementation),
                cpus_per_task=batch.cpus_per_task(run),
                mpirun_options=config.mpirun_options,
            )
        launch_id = uuid.uuid4().hex[:12]
        directory = Path(config.directory) / f"run-{run.id}-{launch_id}"
        directory.mkdir(parents=True, exist_ok=True)
        script = directory / "job.sh"
        script.write_text(batch.batch_script(config, argv, directory))
        script.chmod(0o700)
        job_env = batch.job_environment({**env, RANK_ENDS_VARIABLE: rank_ends_folder(directory)})
        job_env.setdefault(
            "MLBENCH_DATA_DIR",
            setting("MLBENCH_DATA_DIR") or str(Path(config.directory) / "datasets"),
        )
        options = batch.sbatch_options(config, run, directory)
        job_id = commands.submit(config, str(script), options, job_env)
        info: dict[str, Any] = {
            "job_id": job_id,
            "job_name": config.job_name(run.id),
            "dir": str(directory),
            "run_id": str(run.id),
            "launch_id": launch_id,
            "launcher": config.launcher,
            "slurm_conf": config.slurm_conf,
            "sbatch": options,
            "argv": argv,
        }
        notes = {
            "max_bandwidth": {
                "requested_mbit_s": run.max_bandwidth,
                "applied": False,
                "why": NOT_SHAPED,
            },
            "latency": {"requested_ms": run.latency_ms, "applied": False, "why": NOT_SHAPED},
            node_kinds.RECORD_KEY: node_kinds.slurm_nodes(run.num_workers, self._partition_name()),
        }
        return SlurmExecution(info, config, notes)

    def attach(self, run: RunSpec) -> Execution:
        info = run.launch.get("slurm")
        if not info or not info.get("job_id") or not Path(info.get("dir", "")).is_dir():
            raise CannotAttach("no Slurm job of it is recorded to re-attach to")
        notes = {k: v for k, v in run.launch.items() if k != "slurm"}
        return SlurmExecution(info, self.config, notes)

    def _job_ids(self, run: RunSpec) -> list[str]:
        """The run's active jobs: the recorded one, and any named for it (a job submitted
        just before its id could be recorded)."""
        recorded = str((run.launch.get("slurm") or {}).get("job_id") or "")
        name = self.config.job_name(run.id)
        found = [j.job_id for j in commands.jobs(self.config) if j.active and j.name == name]
        return sorted({*found, recorded} - {""})

    def cancel(self, run: RunSpec) -> None:
        for job_id in self._job_ids(run):
            stop_job(self.config, job_id)

    def is_running(self, run: RunSpec) -> bool:
        job_id = str((run.launch.get("slurm") or {}).get("job_id") or "")
        job = commands.job(self.config, job_id) if job_id else None
        return bool(job and job.active)

    def release_leftovers(self, active_run_ids: set[str]) -> list[str]:
        stopped = self._stop_jobs(keep=active_run_ids)
        return [f"Slurm job {job_id} (run {run_id})" for job_id, run_id in stopped]

    def stop_all(self) -> list[str]:
        """Every active job of this master (named by config.job_name), whatever its run."""
        return [run_id for _job_id, run_id in self._stop_jobs(keep=set())]

    def _stop_jobs(self, keep: set[str]) -> list[tuple[str, str]]:
        """scancel this master's active jobs of runs not in `keep`; (job id, run id) each."""
        prefix = self.config.job_name("")
        stopped = []
        for job in commands.jobs(self.config):
            run_id = job.name[len(prefix) :] if job.name.startswith(prefix) else None
            if job.active and run_id and run_id not in keep:
                stop_job(self.config, job.job_id)
                stopped.append((job.job_id, run_id))
        return stopped

    def checkpoint_dir(self, run_id: int) -> str:
        return str(Path(self.config.directory) / "checkpoints" / f"run-{int(run_id)}")

    def delete_checkpoints(self, run_id: int) -> None:
        shutil.rmtree(self.checkpoint_dir(run_id), ignore_errors=True)

    def samples(self, active: RunSpec | None) -> list[PodSample]:
        job_id = str(((active.launch if active else {}).get("slurm") or {}).get("job_id") or "")
        return nodes.samples(
            commands.nodes(self.config), commands.jobs(self.config), active, job_id
        )
