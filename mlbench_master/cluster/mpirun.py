"""The one place that builds mpirun command lines and reads mpirun's output.

Both drivers launch through `mpirun_argv`, so the flags that decide what is measured
(core binding, thread count, which environment reaches the ranks) cannot drift apart
between a laptop and a cluster. `parse_line` undoes Open MPI's `--output tag` prefix.

A command is two parts, each usable alone:

- `launcher_argv(ranks, hosts, ...)`: mpirun itself (rank count, hosts or oversubscription,
  `--bind-to none`, output tagging, the launch agent, the forwarded environment);
- `worker_argv(run, ...)`: what each rank runs (`python -m mlbench_worker TASK ...`, or the
  open-division command).

`mpirun_argv` is their composition for a run. The benchmarks and the tests that start ranks
themselves take their mpirun prefix from `launcher_argv` and append their own program, so
they measure with the product's flags (or say, by an argument, where they differ).
This module imports only the standard library and cluster/base.py: no Django, no settings.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from mlbench_master.cluster.base import ClusterDriver, OutputLine, RunSpec
from mlbench_worker.shared import catalogue
from mlbench_worker.shared.algorithm_catalogue import ALGORITHMS, DEFAULT_ALGORITHM
from mlbench_worker.shared.implementation_catalogue import DEFAULT_IMPLEMENTATION

# Variables every rank needs; passed with -x so they also cross ssh to other hosts.
FORWARDED_ENV = (
    "MLBENCH_MASTER_URL",
    "MLBENCH_RUN_ID",
    "MLBENCH_RUN_TOKEN",
    "MLBENCH_DATA_DIR",
    "OMP_NUM_THREADS",
    "PYTHONUNBUFFERED",
    "MLBENCH_RANK_ENDS",
)

MPIRUN_RANK = "OMPI_COMM_WORLD_RANK"  # each rank's number, as mpirun sets it
SRUN_RANK = "SLURM_PROCID"  # as srun sets it, whatever its --mpi plugin

# Each rank's program runs under this bash script, which says how and when it ended in one
# line (cluster/failures.py reads it): the launcher's own report names the first failure
# IT learned of, which is often a peer that aborted after the real first failure. The child
# runs in the background only so that its pid is known (to find it in the kernel's OOM
# record); the time is bash's EPOCHREALTIME, read without starting a process.
# The script ignores TERM, INT and HUP once its child runs (the child keeps the defaults):
# a launcher stopping the job signals the whole group, the child ends, and the script still
# writes its line (on a loaded machine it may not have had the CPU to write it before).
# The line goes first to a file of its own in the folder RANK_ENDS_VARIABLE names, where
# the driver has a folder the ranks can write to (local, Slurm), then to stderr: a launcher
# that has already ended has closed the pipe its ranks write to, so the stream alone loses
# exactly the lines of a job torn down at once. One file a rank (named RANK.PID), not one
# shared file: appends from several nodes to one file on a network disk can overwrite each
# other. The line in it starts with the rank (mpirun's number, or srun's).
RANK_END = "mlbench rank end:"
RANK_ENDS_VARIABLE = "MLBENCH_RANK_ENDS"
RANK_ENDS_DIR = "rank-ends"
RANK_WATCH_SCRIPT = (
    '"$@" & child=$!\n'
    'trap "" TERM INT HUP\n'
    'wait "$child"; code=$?\n'
    f'end="{RANK_END} code=$code pid=$child time=$EPOCHREALTIME"\n'
    'rank="${OMPI_COMM_WORLD_RANK:-$SLURM_PROCID}"\n'
    f'[ -z "${RANK_ENDS_VARIABLE}" ] || printf "%s %s\\n" "$rank" "$end" 2>/dev/null '
    f'> "${RANK_ENDS_VARIABLE}/$rank.$child"\n'
    'printf "%s\\n" "$end" >&2\n'
    'exit "$code"'
)
RANK_WATCH = ["bash", "-c", RANK_WATCH_SCRIPT, "mlbench-rank"]

_TAG = re.compile(r"^\[(?P<job>\d+),(?P<rank>\d+)\]<(?P<stream>stdout|stderr)>:\s?(?P<text>.*)$")
_LABEL = re.compile(r"^\s*(?P<rank>\d+): ?(?P<text>.*)$")  # srun --label


def threads_per_rank(num_cpus: float) -> int:
    """torch threads for a rank limited to `num_cpus` cores (at least one)."""
    return max(1, int(num_cpus))


def custom_argv(
    run: RunSpec, hosts: list[str] | None = None, rank_variable: str = MPIRUN_RANK
) -> list[str]:
    """The open-division command, with the original platform's placeholders filled in.

    Commands written for the original platform say `{run_id}`, `{hosts}`, `{backend}` and
    `{rank}` (its official command was `... --run_id {run_id} --rank {rank} --hosts {hosts}
    --backend {backend}`), so they are filled in here: hosts as a comma-separated list (of
    "localhost" on the local cluster), backend the custom backend when there is one. The
    rank differs per process, so a command with `{rank}` runs through `sh -c`, which reads
    it from `rank_variable`, the variable the launcher sets in each rank: mpirun's
    OMPI_COMM_WORLD_RANK, or srun's SLURM_PROCID (Open MPI does not set OMPI_COMM_WORLD_RANK
    in ranks srun starts). Other braces are left alone.
    """
    values = {
        "run_id": str(run.id),
        "hosts": ",".join(hosts[: run.num_workers]) if hosts else "localhost",
        "backend": run.custom_backend or run.backend,
    }
    text = run.custom_image_command.strip()
    for name, value in values.items():
        text = text.replace("{" + name + "}", shlex.quote(value))
    if "{rank}" in text:
        return ["sh", "-c", text.replace("{rank}", f'"${rank_variable}"')]
    return shlex.split(text)


def algorithm_argv(run: RunSpec) -> list[str]:
    """The worker's algorithm options: none for the default algorithm with its defaults (the
    command is then exactly what it was before algorithms were a dimension), else the
    algorithm and every one of its options, so the command line says all that ran. An
    uploaded algorithm adds its file's SHA-256 (`--algorithm-source`): each rank fetches
    that file from the master and checks the hash before importing it; its options are
    already completed with the declared defaults (run_rules/algorithms.py)."""
    if not run.algorithm:
        return []
    info = ALGORITHMS.get(run.algorithm)
    options = {**(info.defaults() if info else {}), **run.algorithm_options}
    if run.algorithm == DEFAULT_ALGORITHM and info is not None and options == info.defaults():
        return []
    argv = ["--algorithm", run.algorithm]
    if run.algorithm_source:
        argv += ["--algorithm-source", run.algorithm_source]
    for key, value in sorted(options.items()):
        argv += ["--algorithm-option", f"{key}={_number(value) if _numeric(value) else value}"]
    return argv


def _numeric(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def worker_argv(
    run: RunSpec,
    python: str = "python",
    hosts: list[str] | None = None,
    rank_variable: str = MPIRUN_RANK,
) -> list[str]:
    """The command each rank runs: the reference worker, or the open-division command.

    The reference worker gets the run's seed (always written, so the command says what the
    curves were drawn from), its resolved time budget (accuracy after time: it stops
    training when the budget is spent and evaluates the final model), its checkpoint folder
    and, for a resumed run, the folder of the checkpoint it continues from. `rank_variable`:
    where an open-division command's `{rank}` is read from (see custom_argv).
    """
    if run.open_division:
        return custom_argv(run, hosts, rank_variable)
    argv = [
        python,
        "-m",
        "mlbench_worker",
        run.task,
        "--backend",
        run.backend,
        "--threads",
        str(threads_per_rank(run.num_cpus)),
        "--device",
        "cuda" if run.gpu_enabled else "cpu",
        "--target",
        run.target or "standard",
        "--dataset",
        run.dataset or "auto",
    ]
    if not catalogue.is_measurement(run.task):  # a measurement draws nothing at random
        argv += ["--seed", str(int(run.seed))]
    argv += algorithm_argv(run)
    if run.implementation and run.implementation != DEFAULT_IMPLEMENTATION:
        argv += ["--implementation", run.implementation]
    if run.lr_schedule:  # empty: the task's default, which the worker takes by itself
        argv += ["--lr-schedule", run.lr_schedule]
    if run.time_budget:
        argv += ["--time-budget", _number(run.time_budget)]
    if run.max_epochs:
        argv += ["--max-epochs", str(int(run.max_epochs))]
    if run.test_examples:  # the run is graded on exactly this many (run_rules/test_set.py)
        argv += ["--test-images", str(int(run.test_examples))]
    if run.train_examples:  # (run_rules/training_size.py; task 3 reads it as tokens)
        argv += ["--train-images", str(int(run.train_examples))]
    if run.batch_size:
        argv += ["--batch-size", str(int(run.batch_size))]
    if run.checkpoint_dir:
        argv += ["--checkpoint-dir", run.checkpoint_dir]
    if run.resume_dir:
        # The worker copies the parent's checkpoint into this run's own folder and
        # continues from it, so this run's checkpoints never overwrite the parent's.
        argv += ["--resume", "--resume-from", run.resume_dir]
    return argv


def rank_count(run: RunSpec) -> int:
    """How many ranks `run` starts: its workers; one for an open-division command that does
    not ask to run on all nodes."""
    if run.open_division and not run.run_all_nodes:
        return 1
    return run.num_workers


def launcher_argv(
    ranks: int,
    hosts: list[str] | None = None,
    *,
    mpirun: str = "mpirun",
    agent: str | None = None,
    tag_output: bool = True,
    forward: Sequence[str] = FORWARDED_ENV,
    extra: Sequence[str] = (),
) -> list[str]:
    """mpirun and its options, up to (not including) the program each rank runs.

    `ranks` processes, never bound to cores (`--bind-to none`: each rank's threads use the
    cores the driver gave it). `hosts` empty: every rank on this machine, oversubscribed;
    otherwise one slot on each of the first `ranks` hosts. `agent` is the program mpirun
    starts its daemon on each host with, instead of ssh (the local cluster's worker slots:
    it enters the slot's network namespace); its daemons are then all started by mpirun
    itself (no tree spawn), so the agent only ever runs here. `tag_output` prefixes every
    line with its rank and stream (what `parse_line` reads); `forward` names the variables
    passed with -x, so they also cross ssh to other hosts. `extra` are options the cluster
    needs (the driver's `mpirun_options`, e.g. Slurm's `--leave-session-attached`).
    """
    argv = [mpirun, "-n", str(ranks), "--bind-to", "none", *extra]
    if tag_output:
        argv += ["--output", "tag"]
    if hosts:
        argv += ["--host", ",".join(f"{h}:1" for h in hosts[:ranks])]
    else:
        argv += ["--oversubscribe"]
    if agent:
        argv += ["--mca", "plm_rsh_agent", agent, "--prtemca", "plm_ssh_no_tree_spawn", "1"]
    for name in forward:
        argv += ["-x", name]
    return argv


def mpirun_argv(
    run: RunSpec,
    hosts: list[str] | None = None,
    *,
    mpirun: str = "mpirun",
    python: str = "python",
    agent: str | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """The full mpirun command for `run`; `hosts` empty means every rank on this machine:
    `launcher_argv` (tagged output, FORWARDED_ENV), RANK_WATCH, then `worker_argv`."""
    launcher = launcher_argv(rank_count(run), hosts, mpirun=mpirun, agent=agent, extra=extra)
    return launcher + RANK_WATCH + worker_argv(run, python=python, hosts=hosts)


def driver_argv(driver: ClusterDriver, run: RunSpec, hosts: list[str] | None) -> list[str]:
    """The mpirun command for `run` on the `hosts` that `driver.prepare` returned, with that
    driver's mpirun, the Python of the run's implementation (`python_for`), its launch
    agent and options (what the job launches)."""
    return mpirun_argv(
        run,
        hosts,
        mpirun=driver.mpirun,
        python=driver.python_for(run.implementation),
        agent=driver.launch_agent,
        extra=driver.mpirun_options,
    )


def mca_environment(options: Sequence[str]) -> dict[str, str]:
    """Open MPI's `--mca NAME VALUE` options (as in MLBENCH_SLURM_MPIRUN_OPTIONS) as the
    OMPI_MCA_NAME variables that say the same to ranks mpirun does not start: srun's ranks
    read their MCA parameters from the environment only, so the transport chosen for
    mpirun (e.g. `--mca btl self,tcp`) holds under srun too. Other options are mpirun's
    own and mean nothing to srun's ranks."""
    env: dict[str, str] = {}
    words = list(options)
    for i, word in enumerate(words[:-2]):
        if word in ("--mca", "-mca", "--gmca", "-gmca"):
            env[f"OMPI_MCA_{words[i + 1]}"] = words[i + 2]
    return env


def srun_argv(
    run: RunSpec,
    *,
    srun: str = "srun",
    mpi: str = "pmix",
    python: str = "python",
    cpus_per_task: int = 1,
    mpirun_options: Sequence[str] = (),
) -> list[str]:
    """`run` started by Slurm's srun inside its allocation instead of mpirun (the Slurm
    driver with MLBENCH_SLURM_LAUNCHER=srun): one task a node with `cpus_per_task` CPUs
    (Slurm 22.05's srun no longer takes the job's --cpus-per-task by itself), never bound
    to cores (as `--bind-to none`), the ranks wired up by Slurm's PMI plugin `mpi` (pmix for
    Open MPI 5, which has no PMI-2: under pmi2 each of its ranks is a world of one), output
    labelled by rank (`parse_labelled_line`), and the whole step killed when one rank fails
    (as mpirun does). The environment reaches the ranks as it does the batch script (srun
    exports it), so nothing needs forwarding; the MCA options meant for mpirun are set as
    variables in front of srun (`mca_environment`), and `{rank}` reads srun's SLURM_PROCID."""
    mca = mca_environment(mpirun_options)
    argv = ["env", *(f"{k}={v}" for k, v in mca.items())] if mca else []
    argv += [srun, f"--mpi={mpi}", "--label", f"--ntasks={rank_count(run)}"]
    argv += ["--ntasks-per-node=1", f"--cpus-per-task={max(1, int(cpus_per_task))}"]
    argv += ["--cpu-bind=none", "--kill-on-bad-exit=1"]
    return argv + RANK_WATCH + worker_argv(run, python=python, rank_variable=SRUN_RANK)


def rank_environment(run: RunSpec, master_url: str, token: str) -> dict[str, str]:
    """Environment the job adds for the ranks (names listed in FORWARDED_ENV)."""
    threads = str(threads_per_rank(run.num_cpus))
    return {
        "MLBENCH_MASTER_URL": master_url,
        "MLBENCH_RUN_ID": str(run.id),
        "MLBENCH_RUN_TOKEN": token,
        "OMP_NUM_THREADS": threads,
        "PYTHONUNBUFFERED": "1",
        RANK_ENDS_VARIABLE: "",  # a driver with a folder the ranks can write names one
    }


def parse_line(line: str, stream: str = "stdout") -> OutputLine:
    """Attribute one line of mpirun output; untagged lines come from mpirun itself.

    NUL characters are dropped: the output is text, and PostgreSQL text cannot hold them
    (Open MPI's abort message, forwarded by a remote daemon, ends with one).
    """
    line = line.rstrip("\r\n").replace("\x00", "")
    match = _TAG.match(line)
    if match:
        return OutputLine(int(match["rank"]), match["stream"], match["text"])
    return OutputLine(None, stream, line)


def parse_labelled_line(line: str, stream: str = "stdout") -> OutputLine:
    """Attribute one line of `srun --label` output (`RANK: text`); others are srun's own."""
    line = line.rstrip("\r\n").replace("\x00", "")
    match = _LABEL.match(line)
    if match:
        return OutputLine(int(match["rank"]), stream, match["text"])
    return OutputLine(None, stream, line)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)
