"""The contract between the run job and a cluster driver.

A run's job talks to workers only through `ClusterDriver` and the `Execution` a launch
returns, so the local driver (processes on this machine) and the Kubernetes driver (a
StatefulSet's pods) are interchangeable and the orchestration code has a single path.
Every operation the job uses is declared here; nothing is probed with getattr.

Drivers are called, they never call back: they read a frozen `RunSpec` (built from the
`Run` row in one place, `runs.run_spec`), report through return values and exceptions with
reasons, and return their launch record instead of writing into the model. `runs` decides
what happens to the run. This package imports nothing from `api` or `runs`.
"""

from __future__ import annotations

import datetime as dt
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from mlbench_master.cluster.environment import setting
from mlbench_master.run_defaults import DEFAULT_TASK_TIME_LIMIT, DEFAULTS
from mlbench_worker.shared import implementation_catalogue


@dataclass(frozen=True)
class RunSpec:
    """What a driver and the mpirun builder may know of a run (a snapshot, never the row).

    `launch` is the record the driver's last `launch` returned (`Execution.record`), as the
    job stored it; empty before the first launch. `attach`, `cancel` and `is_running` read
    it, so they work from any process of the master, after a restart too.

    Every field is filled from the run by runs.run_spec, with the values the run rules
    (mlbench_master/run_rules/) decided. The defaults below serve code that builds a
    snapshot by hand (driver tests): they are the run defaults (the one table,
    mlbench_master/run_defaults.py), so such a snapshot is the one of a run made in code.

    `time_budget` is already resolved (the run's own, else its task's or what fits in its
    time limit; None only for the open division). `checkpoint_dir` and `resume_dir` are folders as the worker hosts see
    them (the driver's `checkpoint_dir`), filled in by the job before it builds the command:
    where this run's ranks write their checkpoints, and the folder of the run this one
    continues (empty: a fresh start). The builder only reads them, never settings.
    """

    id: int
    task: str = DEFAULTS["task"]
    backend: str = DEFAULTS["backend"]
    num_workers: int = DEFAULTS["num_workers"]
    num_cpus: float = DEFAULTS["num_cpus"]
    max_bandwidth: int = DEFAULTS["max_bandwidth"]
    latency_ms: float | None = DEFAULTS["latency"]  # added to each packet on each worker's link
    gpu_enabled: bool = DEFAULTS["gpu_enabled"]
    target: str = DEFAULTS["target"]
    dataset: str = DEFAULTS["dataset"]
    time_budget: float | None = DEFAULTS["time_budget"]
    max_epochs: int | None = DEFAULTS["max_epochs"]
    time_limit: int = DEFAULT_TASK_TIME_LIMIT  # DEFAULTS': derived from the budget
    custom_image_name: str = ""
    custom_image_command: str = ""
    custom_backend: str = ""
    run_all_nodes: bool = DEFAULTS["run_all_nodes"]
    checkpoint_dir: str = ""
    resume_dir: str = ""
    # Empty: the worker's default (allreduce); see mpirun.worker_argv.
    algorithm: str = DEFAULTS["algorithm"]
    # DEFAULTS' {}: the algorithm's own defaults (a dict of its own for each snapshot).
    algorithm_options: dict[str, Any] = field(default_factory=dict, compare=False)
    # An uploaded algorithm's SHA-256 (the rank fetches and checks the file); empty: none.
    algorithm_source: str = ""
    implementation: str = DEFAULTS["implementation"]  # empty: the reference loop; see mpirun
    seed: int = DEFAULTS["seed"]  # what every rank seeds from (the worker's --seed)
    lr_schedule: str = DEFAULTS["lr_schedule"]  # empty: the task's default; see mpirun
    test_examples: int | None = None  # the test set's size when smaller than the whole one
    train_examples: int | None = None  # the training set's size when not the whole one
    batch_size: int | None = None  # per worker, when not the task's
    launch: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def open_division(self) -> bool:
        """A user's own command instead of the reference worker."""
        return bool(self.custom_image_command.strip())


class ClusterError(Exception):
    """A failure a person can act on; its message becomes the run's FAILED reason."""


class PrepareTimeout(ClusterError):
    """The workers did not become ready in time (the message names the pod and why)."""


class CannotAttach(ClusterError):
    """There is no launch to re-attach to; the message says why (for the FAILED reason)."""


@dataclass(frozen=True)
class PodInfo:
    """One worker slot, in the shape the API's /api/pods/ serves."""

    name: str
    labels: dict[str, str]
    phase: str
    ip: str
    node: str = ""


@dataclass(frozen=True)
class PodSample:
    """One resource reading of one worker (CPU cores in use, bytes of memory, network bytes).

    `metadata` carries `run_id` and `rank` when the worker was running a run's rank.
    """

    pod_name: str
    name: str
    value: float
    date: dt.datetime
    cumulative: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class OutputLine:
    """A line of mpirun's output, attributed to the rank that wrote it when known."""

    rank: int | None
    stream: str  # "stdout" | "stderr"
    text: str
    # Where the line ends in its stream's output (bytes, just past its newline) when the
    # launch is read by offset from files: what keeps it from being stored twice when a
    # stretch is read again (runs/logs.py). None for a line the master made up. Not part
    # of what the line says, so not compared.
    end: int | None = field(default=None, compare=False)


class Execution(ABC):
    """A launched mpirun: its output as it comes, its exit code, and a way to stop it."""

    launcher = "mpirun"  # what started the ranks, as a FAILED reason names it (or "srun")

    @property
    @abstractmethod
    def record(self) -> dict[str, Any]:
        """JSON the job stores with the run (`Run.job_metadata`): what `attach`, `cancel`
        and `is_running` need to find this launch again, and notes on what was applied."""

    @abstractmethod
    def read(self, timeout: float) -> list[OutputLine]:
        """Lines that arrived, waiting at most `timeout` seconds; [] when none came."""

    @abstractmethod
    def poll(self) -> int | None:
        """mpirun's exit code once it has exited and its output is drained, else None."""

    @property
    @abstractmethod
    def exit_known(self) -> bool:
        """False when mpirun ended unwatched and no exit code was recorded (it was killed);
        `poll` then answers 137 and the job fails the run saying the code is unknown."""

    @abstractmethod
    def checkpoint(self) -> None:
        """Every line handed out by `read` is stored: a re-attached reader starts after
        them. The job calls it after each successful write of the log. It saves where to
        read on, nothing more: a save that never came (the job died just before it) or a
        second reader of the same launch reads lines again, which the log's store leaves
        out by their `end` within `source`."""

    @property
    def source(self) -> str | None:
        """What names this launch's output, in which the lines' `end` offsets count: the
        same for every reader of the launch (a re-attached one too), another for another
        launch of the run. None (the default) where lines carry no offsets."""
        return None

    @abstractmethod
    def kill(self) -> None:
        """Stop mpirun and every rank it started; returns when they are gone."""

    def waiting(self) -> str | None:
        """Why the ranks have not started yet, when a scheduler holds them in its queue
        (the run shows it as its reason meanwhile); None once they run, and for drivers
        whose ranks start at once."""
        return None

    def end_reason(self) -> str | None:
        """Why the launch ended when the cluster, not mpirun, decided it (a scheduler's
        time limit, a lost node, out of memory, a request it can never grant): the run's
        FAILED reason. None when mpirun's exit code and output say it (the default)."""
        return None

    def oom_killed(self, pids: set[int]) -> set[int]:
        """Which of the ranks' programs (by the pids their watchers wrote) the kernel's
        OOM killer ended, where this driver can read the kernel's record of it; empty
        where it cannot (the default: the reason then says "out of memory?")."""
        return set()

    def recorded_rank_ends(self) -> str:
        """The ranks' end lines their watchers wrote to a file beside the output (one
        "RANK mlbench rank end: ..." a line; see mpirun.RANK_WATCH), where this driver has
        such a folder; "" where it has none (the default: the output stream alone)."""
        return ""


class ClusterDriver(ABC):
    """One implementation per kind of cluster; chosen by MLBENCH_CLUSTER."""

    name: str = ""
    # mpirun's launch agent (Open MPI's plm_rsh_agent) when the hosts `prepare` returned are
    # not reached by mpirun's own means; None: its default.
    launch_agent: str | None = None
    # Options mpirun needs on this cluster, before the worker command (Slurm: keep mpirun's
    # daemons in the job's process tree, so that Slurm's cancel reaches every rank).
    mpirun_options: tuple[str, ...] = ()

    @property
    @abstractmethod
    def mpirun(self) -> str:
        """The mpirun program to launch, as the launching host resolves it."""

    @property
    @abstractmethod
    def python(self) -> str:
        """The ranks' Python interpreter, as the worker hosts resolve it."""

    @abstractmethod
    def check_workers(self, num_workers: int) -> None:
        """Raise ClusterError when this cluster can never give `num_workers` workers (the
        API refuses such a run before storing it; `prepare` checks again)."""

    @abstractmethod
    def pods(self) -> list[PodInfo]:
        """The worker slots that exist now."""

    @abstractmethod
    def prepare(self, run: RunSpec) -> list[str]:
        """Provide `run.num_workers` workers with the run's limits; return the mpirun hosts.

        An empty list means "this machine". Raises ClusterError (or PrepareTimeout) with a
        reason a person can act on.
        """

    @abstractmethod
    def launch(self, run: RunSpec, argv: list[str], env: dict[str, str]) -> Execution:
        """Start the mpirun command `argv` (built by cluster.mpirun) with `env` added."""

    @abstractmethod
    def attach(self, run: RunSpec) -> Execution:
        """The launch recorded in `run.launch`, to go on reading it after the job that
        started it is gone; raises CannotAttach with the reason when there is none."""

    def check_cpus(self, num_cpus: float) -> None:  # noqa: B027 - nothing to check by default
        """Raise ClusterError when no worker of this cluster can ever have `num_cpus` CPUs
        (a scheduler's nodes are smaller); the default leaves it to MLBENCH_MAX_CPUS."""

    def problems(self) -> list[str]:
        """What keeps this driver from running workers now, in words a person can act on
        (bad settings, an unreachable scheduler); said at master start and on the Workers
        page. [] when nothing does (the default)."""
        return []

    def python_for(self, implementation: str) -> str:
        """The ranks' Python for a run of `implementation`: the one the setting its catalogue
        entry names (`python_setting`: an environment of its own, Flink's) where that is
        set, else the driver's `python`. Every launch and every probe asks here."""
        impl = implementation_catalogue.get(implementation or "")
        if impl is not None and impl.python_setting:
            chosen = setting(impl.python_setting)
            if chosen:
                return chosen
        return self.python

    def has_requirement(self, requirement: str, implementation: str) -> bool | None:
        """has_module for a requirement of `implementation`, asked of its ranks' Python."""
        python = self.python_for(implementation)
        if python == self.python:
            return self.has_module(requirement)
        return self.has_module(requirement, python)

    def has_module(self, module: str, python: str | None = None) -> bool | None:
        """Whether the workers' Python (`python`, else the driver's) can import `module` (an
        implementation's framework, e.g. tensorflow), so the API can refuse a run its
        workers cannot start; None when this driver cannot tell from the master, and the
        worker then says so itself."""
        return None

    def modules_checked_with(self, python: str | None = None) -> str:
        """Which Python has_module asked, as a refusal names it."""
        return python or self.python

    def release_leftovers(self, active_run_ids: set[str]) -> list[str]:
        """Remove what the driver set up for runs that are no longer active (a crash left it
        behind); called at master start and by the reconcile rounds. Returns what it removed.
        Drivers that set up nothing outside a run's own processes have nothing to release."""
        return []

    @abstractmethod
    def cancel(self, run: RunSpec) -> None:
        """Stop every process of `run`, from any process of the master (not only the job's)."""

    @abstractmethod
    def stop_all(self) -> list[str]:
        """Stop every launch of this master, of any run, and remove what was set up for
        them; called when the master itself stops. Found by the driver's own means (markers,
        names), never through the database or Redis, which may be what is down. Returns the
        ids of the runs whose processes were found, where the driver can tell (the master
        says which of them it could not mark); ClusterError when something survives."""

    @abstractmethod
    def is_running(self, run: RunSpec) -> bool:
        """Whether ranks of `run` are still alive (used to reconcile after a master restart)."""

    @abstractmethod
    def checkpoint_dir(self, run_id: int) -> str:
        """The folder where the ranks of run `run_id` write its checkpoints, as the worker
        hosts see it (rank 0 writes; a later run resuming it reads from there).

        It must outlive the run: a FAILED or CANCELLED run keeps its last checkpoint so
        that a new run can continue from it (`resume_from`). The worker creates the folder.
        """

    def delete_checkpoints(self, run_id: int) -> None:  # noqa: B027 - a no-op default on purpose
        """Remove run `run_id`'s checkpoint folder (called when the run is deleted).

        The default removes nothing: a driver whose checkpoints live where the master
        cannot reach them leaves them, and the docs say so. A driver that can remove them
        overrides this.
        """

    @abstractmethod
    def samples(self, active: RunSpec | None) -> list[PodSample]:
        """A resource reading of every worker now ([] when none can be had); readings of
        the workers of `active` (the run in progress) carry its run id and their rank."""
