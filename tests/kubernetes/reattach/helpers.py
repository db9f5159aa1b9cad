"""What the re-attach tests share: mpirun's stand-in that prints in gated steps, a driver
as a restarted master has it, and readers of an Execution's lines."""

from __future__ import annotations

import time
from pathlib import Path

from mlbench_master.cluster.kubernetes import KubernetesCluster
from tests.kubernetes.chart import NAMESPACE, RELEASE
from tests.kubernetes.conftest import Run, launch_processes

# Prints "$1" lines of step 1, then waits for gate file "$2" before each next step.
STEPS = r"""
echo "[1,0]<stdout>: step 1 line 1"
echo "[1,1]<stderr>: step 1 warning" >&2
printf '[1,0]<stdout>: step 1 without its end, '
while [ ! -e "$1/gate-1" ]; do sleep 0.05; done
printf 'ended in step 2 (caf\303\251)\n'
echo "[1,0]<stdout>: step 2 line 2"
while [ ! -e "$1/gate-2" ]; do sleep 0.05; done
echo "[1,0]<stdout>: step 3 line 1"
echo "[1,1]<stderr>: step 3 warning" >&2
exit "$2"
"""
EVERY_LINE = [
    (0, "stdout", "step 1 line 1"),
    (1, "stderr", "step 1 warning"),
    (0, "stdout", "step 1 without its end, ended in step 2 (café)"),
    (0, "stdout", "step 2 line 2"),
    (0, "stdout", "step 3 line 1"),
    (1, "stderr", "step 3 warning"),
]


def stepped_run(pods_exec, gates: Path, code: int = 0) -> Run:
    pods_exec.program = ["sh", "-c", STEPS, "fake-mpirun", str(gates), str(code)]
    return Run(num_workers=2)


def restarted_driver(emulator, pods_exec, pod_state) -> KubernetesCluster:
    """A driver as a restarted master has it: nothing of the old one but the cluster."""
    return KubernetesCluster(
        api_client=emulator.client,
        namespace=NAMESPACE,
        release=RELEASE,
        open_channel=pods_exec,
        state_dir=str(pod_state),
    )


def as_stored(run, execution):
    """The run as the job stores it after launch (runs.record_launch) and reads it back."""
    return Run(id=run.id, num_workers=run.num_workers, launch=execution.record)


def read_until(execution, count: int, limit: float = 10.0) -> list:
    lines: list = []
    deadline = time.monotonic() + limit
    while len(lines) < count:
        assert time.monotonic() < deadline, f"only {lines} came"
        lines += execution.read(0.1)
    return lines


def read_to_end(execution, limit: float = 15.0) -> list:
    lines: list = []
    deadline = time.monotonic() + limit
    while execution.poll() is None:
        assert time.monotonic() < deadline, f"the launch did not end; read {lines}"
        lines += execution.read(0.1)
    return lines


def triples(lines) -> list[tuple]:
    return [(line.rank, line.stream, line.text) for line in lines]


def by_stream(triples) -> dict[str, list[tuple]]:
    """Lines per stream, in order: how stdout and stderr interleave is up to the reader."""
    return {s: [t for t in triples if t[1] == s] for s in ("stdout", "stderr")}


def store_lines(execution, lines, stored: list) -> None:
    """What the job's log writer does: store the lines, then checkpoint."""
    stored += triples(lines)
    execution.checkpoint()


def saved_offsets(execution) -> tuple[int, int]:
    path = Path(execution.launch.directory) / "offsets"
    try:
        out, err = path.read_text().split()
    except (OSError, ValueError):
        return (0, 0)
    return int(out), int(err)


def die(pods_exec) -> None:
    """The master process goes away: every exec session it had open drops."""
    for _name, channel in pods_exec.opened:
        channel.close()


def alive(pod_state) -> bool:
    return bool(launch_processes(pod_state))
