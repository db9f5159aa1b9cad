"""LocalCluster: worker ranks as processes on this machine, started by one mpirun.

Why it is shaped like this:

- mpirun runs under a tiny `sh` wrapper in a session of its own, with its output written to
  files (not pipes) and its exit code written to a file when it ends. A run therefore
  survives a restart of the master, and the next master re-attaches (execution.py).
- Every process of a launch carries marker variables (processes.py), so `cancel` and
  `is_running` work from any process of the master and no rank is ever left behind.
- The slots (`local-worker-0` ...) are reported busy from the rank processes that exist,
  not from bookkeeping that could drift.
- Each slot is a host of its own when the master may create network namespaces
  (slots.py, network.py): ranks reach each other over links shaped to the run's
  `max_bandwidth` and `latency`, started there by mpirun through a launch agent. The slots
  exist from `prepare` until the launch is killed or ends (the job kills it at every end),
  a cancel, or the next master start.
- Checkpoints live in MLBENCH_HOME/checkpoints/run-<id>, outside a launch's own folder,
  so they outlive the launch and a later run can resume from them; deleting the run
  removes them.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import psutil

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
from mlbench_master.cluster.local import slots
from mlbench_master.cluster.local.execution import LocalExecution, launch_session
from mlbench_master.cluster.local.processes import (
    CLUSTER_MARK,
    LAUNCH_MARK,
    RUN_MARK,
    environ_of,
    kill_processes,
    launch_processes,
    rank_processes,
)
from mlbench_master.cluster.local.usage import POD_PREFIX, rank_samples
from mlbench_master.cluster.mpirun import RANK_ENDS_VARIABLE
from mlbench_master.cluster.node_kinds import RECORD_KEY, local_nodes
from mlbench_master.cluster.python_probe import python_has_module
from mlbench_worker.shared.home import mlbench_home

# Runs `mpirun ...` ("$@"), then records its exit code atomically next to its output.
_WRAPPER = '"$@"; code=$?; echo "$code" > "$0.tmp" && mv "$0.tmp" "$0"; exit "$code"'
CHECKPOINTS = "checkpoints"  # MLBENCH_HOME/checkpoints/run-<id>/checkpoint.pt


def cluster_home() -> Path:
    """MLBENCH_HOME as the master resolved it (settings), by mlbench_worker.shared.home's rule."""
    value = setting("MLBENCH_HOME")
    if value and value.strip():
        return Path(value).expanduser()

    return mlbench_home()


def local_slots() -> int:
    """MLBENCH_LOCAL_WORKERS, or the number of cores of this machine."""
    value = setting("MLBENCH_LOCAL_WORKERS")
    if value is None:
        return os.cpu_count() or 1
    try:
        slots = int(value)
    except (TypeError, ValueError) as exc:
        raise ClusterError(
            f"MLBENCH_LOCAL_WORKERS={value!r} is not a whole number of worker slots"
        ) from exc
    if slots < 1:
        raise ClusterError(f"MLBENCH_LOCAL_WORKERS={value!r} must be at least 1")
    return slots


def machine_cores() -> int:
    """The cores this process may run on (its CPU affinity: what a container or `taskset`
    leaves it), else the machine's count: what the ranks of a local run share, since they
    are not bound to cores."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity on this platform
        return os.cpu_count() or 1


def venv_bin() -> Path:
    """The directory of this interpreter: where the virtualenv's mpirun lives."""
    return Path(sys.executable).parent


def find_mpirun() -> str:
    candidate = venv_bin() / "mpirun"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("mpirun")
    if found:
        return found
    raise ClusterError(
        "mpirun not found next to the Python interpreter or on PATH: "
        "install the worker extra (pip install 'mlbench[worker]') which brings Open MPI"
    )


def stop_launches(home: Path) -> list[str]:
    """Every process carrying `home`'s marker (mpirun, its daemons, the ranks, of any run),
    then the slots and their relay; the ids of the runs found. No settings, no database:
    the driver's stop_all, and `mlbench down` after a supervisor that did not stop."""
    runs = {environ_of(proc).get(RUN_MARK, "") for proc in launch_processes(home)}
    try:
        kill_processes(lambda: launch_processes(home))
    finally:
        slots.close_slots(home)
    return sorted((run for run in runs if run), key=lambda run: (len(run), run))


class LocalCluster(ClusterDriver):
    """`MLBENCH_CLUSTER=local`: MLBENCH_LOCAL_WORKERS slots on this machine."""

    name = "local"

    def __init__(self) -> None:
        self.home = cluster_home()
        self.slots = local_slots()
        self.hostname = socket.gethostname()

    @property
    def mpirun(self) -> str:
        return find_mpirun()

    @property
    def python(self) -> str:
        return sys.executable

    def has_module(self, module: str, python: str | None = None) -> bool | None:
        return python_has_module(python or self.python, module)

    def check_workers(self, num_workers: int) -> None:
        if num_workers > self.slots:
            raise ClusterError(
                f"num_workers is {num_workers} but this machine has {self.slots} local worker "
                "slots (MLBENCH_LOCAL_WORKERS); ask for at most that many"
            )

    def cores(self) -> int:
        """The cores every rank of a run shares (`machine_cores`): the run rules give a run
        that leaves its CPUs out this many divided among its workers, and say when a run
        asks for more threads than this (run_rules/cores.py)."""
        return machine_cores()

    def pods(self) -> list[PodInfo]:
        busy = {rank for (_run, rank) in rank_processes(self.home)}
        return [
            PodInfo(
                name=f"{POD_PREFIX}{i}",
                labels={"app": "mlbench", "component": "worker", "cluster": "local"},
                phase="Running" if i in busy else "Idle",
                ip="127.0.0.1",
                node=self.hostname,
            )
            for i in range(self.slots)
        ]

    def prepare(self, run: RunSpec) -> list[str]:
        if run.num_workers > self.slots:
            raise ClusterError(
                f"the run asks for {run.num_workers} workers but this machine has "
                f"{self.slots} local worker slots (set MLBENCH_LOCAL_WORKERS to change that)"
            )
        others = {r for (r, _rank) in rank_processes(self.home) if r != str(run.id)}
        if others:
            raise ClusterError(
                "the local worker slots are still busy with the ranks of run "
                + ", ".join(sorted(others))
                + ": delete that run (mlbench delete RUN) and try again"
            )
        find_mpirun()
        return slots.open_slots(self.home, run, setting("MLBENCH_MASTER_URL") or "")

    @property
    def launch_agent(self) -> str | None:  # type: ignore[override]
        return slots.launch_agent(self.home)

    def launch(self, run: RunSpec, argv: list[str], env: dict[str, str]) -> Execution:
        launch_id = uuid.uuid4().hex[:12]
        directory = self.home / "local-cluster" / f"run-{run.id}-{launch_id}"
        directory.mkdir(parents=True, exist_ok=True)
        data_dir = setting("MLBENCH_DATA_DIR")
        full_env = dict(os.environ)
        full_env.update(env)
        full_env["PATH"] = f"{venv_bin()}{os.pathsep}{full_env.get('PATH', '')}"
        full_env.setdefault("MLBENCH_DATA_DIR", str(data_dir or self.home / "datasets"))
        full_env[CLUSTER_MARK] = str(self.home)
        full_env[RUN_MARK] = str(run.id)
        full_env[LAUNCH_MARK] = launch_id
        # Django's settings module must not leak into the ranks' environment as a hint, nor
        # the installation's signing key (docs/publishing.rst) into a user's command.
        full_env.pop("DJANGO_SETTINGS_MODULE", None)
        full_env.pop("MLBENCH_SIGNING_KEY", None)
        full_env.update(slots.rank_environment(self.home))
        full_env[RANK_ENDS_VARIABLE] = rank_ends_folder(directory)
        with (
            open(directory / "stdout.log", "wb") as out,
            open(directory / "stderr.log", "wb") as err,
        ):
            popen = subprocess.Popen(
                ["/bin/sh", "-c", _WRAPPER, str(directory / "exit_code"), *argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=full_env,
                cwd=str(directory),
                start_new_session=True,
            )
        info = {
            "launch_id": launch_id,
            "pid": popen.pid,
            "sid": popen.pid,
            "create_time": psutil.Process(popen.pid).create_time(),
            "dir": str(directory),
            "home": str(self.home),
            "run_id": str(run.id),
            "argv": argv,
        }
        (directory / "launch.json").write_text(json.dumps(info))
        notes = {**slots.launch_notes(self.home, run), RECORD_KEY: local_nodes(run.num_workers)}
        return LocalExecution(info, popen=popen, notes=notes)

    def attach(self, run: RunSpec) -> Execution:
        info = run.launch.get("local")
        if not info or not Path(info.get("dir", "")).is_dir():
            raise CannotAttach("no launch of it is recorded to re-attach to")
        notes = {k: v for k, v in run.launch.items() if k != "local"}
        return LocalExecution(info, notes=notes)

    def cancel(self, run: RunSpec) -> None:
        info = run.launch.get("local") or {}
        try:
            kill_processes(lambda: launch_processes(self.home, run.id, *launch_session(info)))
        finally:
            slots.close_slots(self.home, run.id)

    def release_leftovers(self, active_run_ids: set[str]) -> list[str]:
        return slots.release_leftovers(self.home, active_run_ids)

    def stop_all(self) -> list[str]:
        return stop_launches(self.home)

    def is_running(self, run: RunSpec) -> bool:
        info = run.launch.get("local") or {}
        return bool(launch_processes(self.home, run.id, *launch_session(info)))

    def checkpoint_dir(self, run_id: int) -> str:
        return str(self.home / CHECKPOINTS / f"run-{int(run_id)}")

    def delete_checkpoints(self, run_id: int) -> None:
        shutil.rmtree(self.checkpoint_dir(run_id), ignore_errors=True)

    def samples(self, active: RunSpec | None) -> list[PodSample]:
        # The ranks' own markers say which run and rank each reading belongs to.
        return rank_samples(self.home)
