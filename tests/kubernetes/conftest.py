"""Fixtures for the Kubernetes driver: the API emulator, the chart's worker StatefulSet, and
exec channels that stand in for pods (the emulator cannot serve exec).

The launch's own scripts (detach.py) run for real on this machine, in a directory that
stands for the pods' "state" emptyDir: mpirun's stand-in really is detached, really writes
its files, and really outlives the channels and the driver that started it.
"""

from __future__ import annotations

import codecs
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from mlbench_master.cluster.base import RunSpec
from mlbench_master.cluster.kubernetes import KubernetesCluster, detach, worker_statefulset_name
from mlbench_master.cluster.kubernetes.names import LAUNCH_MARK
from tests.kubernetes.chart import NAMESPACE, RELEASE, find, manifests
from tests.kubernetes.controllers import Controller
from tests.kubernetes.emulator import Emulator

STS = worker_statefulset_name(RELEASE)


@pytest.fixture(scope="session")
def worker_manifest():
    """The worker StatefulSet exactly as the chart renders it with its defaults."""
    return find(manifests(), "StatefulSet", STS)


@pytest.fixture
def emulator():
    with Emulator(metrics_api=False) as api:
        yield api


@pytest.fixture
def controller(emulator, worker_manifest):
    control = Controller(emulator.client, NAMESPACE)
    control.create_statefulset(worker_manifest)
    return control


def Run(**fields):  # noqa: N802 - reads like the row it stands for
    """A run as drivers see it (cluster.base.RunSpec); the tests' defaults: id 7, no
    bandwidth limit, and 1 CPU, the chart's worker limit, which the pods the tests make
    have (RunSpec's own defaults are a default run's: 2 CPUs)."""
    fields.setdefault("id", 7)
    fields.setdefault("max_bandwidth", 0)
    fields.setdefault("num_cpus", 1.0)
    return RunSpec(**fields)


class LocalChannel:
    """A command that really runs, here, as a local process (stands in for a command in a
    pod): a detached launch really outlives it, as it outlives an exec session in a pod.

    Closing it kills its process group, like a dropped session whose processes are gone.
    Chunks come as the pipes give them (bytes when `binary`, else decoded text).
    """

    def __init__(self, command: list[str], binary: bool = False) -> None:
        self._binary = binary
        self._proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self._chunks: list[tuple[str, str | bytes]] = []
        self._arrived = threading.Condition()
        self._readers = [
            threading.Thread(target=self._pump, args=(self._proc.stdout, "stdout"), daemon=True),
            threading.Thread(target=self._pump, args=(self._proc.stderr, "stderr"), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _pump(self, pipe, name):
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        while True:
            data = pipe.read1(65536)
            chunk = data if self._binary else decoder.decode(data, final=not data)
            with self._arrived:
                if chunk:
                    self._chunks.append((name, chunk))
                self._arrived.notify_all()
            if not data:
                return

    def _finished(self):
        return self._proc.poll() is not None and not any(r.is_alive() for r in self._readers)

    def read(self, timeout):
        with self._arrived:
            self._arrived.wait_for(lambda: self._chunks or self._finished(), timeout)
            chunks, self._chunks = self._chunks, []
        return chunks

    def write(self, text):
        self._proc.stdin.write(text.encode() if isinstance(text, str) else text)
        self._proc.stdin.flush()

    def done(self):
        if not self._finished():
            for reader in self._readers:  # the pipes may hold the last bytes yet
                reader.join(0.05)
        with self._arrived:
            return self._finished() and not self._chunks

    def status(self):
        code = self._proc.wait()
        return (code if code >= 0 else 128 - code), ""

    def close(self):
        if self._proc.poll() is None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._proc.wait()
        try:
            self._proc.stdin.close()
        except OSError:
            pass


class CannedChannel:
    """A short pod command that is recorded, not run (it would act on this machine)."""

    def __init__(self, code: int, output: str) -> None:
        self._code, self._output, self._read = code, output, False

    def read(self, timeout):
        if self._read:
            return []
        self._read = True
        return [("stdout", self._output)] if self._output else []

    def write(self, text):
        pass

    def done(self):
        return self._read

    def status(self):
        return self._code, ""

    def close(self):
        pass


# The launch's scripts (detach.py) run for real, here; the other commands would act on this
# machine (tc, pkill by name) and are recorded and answered instead.
LOCAL_SCRIPTS = {detach.LAUNCH, detach.STREAM, detach.PROBE, detach.SAVE, detach.STOP}
# sh -c SCRIPT NAME DIRECTORY LAUNCH_ID: what comes before mpirun's argv in a launch
LAUNCH_PREFIX = 6


def script_name(command: list[str]) -> str:
    """The name ($0) a `sh -c` command of the driver runs under."""
    return command[3] if len(command) > 3 and command[:2] == ["sh", "-c"] else ""


def local_channel(command: list[str], binary: bool, program: list[str] | None) -> LocalChannel:
    """Run a launch script here; `program` (when given) stands in for mpirun's argv."""
    if program is not None and script_name(command) == detach.LAUNCH:
        command = command[:LAUNCH_PREFIX] + program
    return LocalChannel(command, binary=binary)


@dataclass
class Pods:
    """The exec seam for tests: records every (pod, command); runs the launch scripts here.

    `answers` (a needle in the command -> exit code and output, or an exception) come first;
    `program`, when set, runs instead of the launched mpirun command.
    """

    calls: list[tuple[str, list[str]]] = field(default_factory=list)
    answers: dict[str, tuple[int, str] | Exception] = field(default_factory=dict)
    program: list[str] | None = None
    opened: list[tuple[str, LocalChannel]] = field(default_factory=list)

    def __call__(self, pod: str, command: list[str], *, binary: bool = False):
        self.calls.append((pod, command))
        for needle, answer in self.answers.items():
            if needle in " ".join(command):
                if isinstance(answer, Exception):
                    raise answer
                return CannedChannel(*answer)
        if script_name(command) in LOCAL_SCRIPTS:
            channel = local_channel(command, binary, self.program)
            self.opened.append((script_name(command), channel))
            return channel
        return CannedChannel(0, "")

    def scripts(self, pod: str | None = None) -> list[str]:
        return [" ".join(c) for p, c in self.calls if pod is None or p == pod]

    def named(self, name: str) -> list[tuple[str, list[str]]]:
        """The (pod, command) calls of the launch script `name` (detach.LAUNCH ...)."""
        return [(p, c) for p, c in self.calls if script_name(c) == name]


def launch_processes(state_dir: Path) -> list[psutil.Process]:
    """The live processes of every launch under `state_dir`, found by their marker."""
    ids = {d.name.rsplit("-", 1)[-1] for d in (state_dir / "launches").glob("run-*")}
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(LAUNCH_MARK) in ids and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def kill_launches(state_dir: Path) -> None:
    """SIGKILL every launch process under `state_dir`; one may end by itself meanwhile (a
    wrapper's child dies with it), which is what was wanted."""
    for proc in launch_processes(state_dir):
        try:
            proc.kill()
        except psutil.Error:
            pass


@pytest.fixture
def pod_state(tmp_path):
    """The "state" directory of the emulated pods (here, on this machine); every process a
    test launched there is killed afterwards."""
    state = tmp_path / "pod-state"
    state.mkdir()
    yield state
    kill_launches(state)
    deadline = time.monotonic() + 10
    while launch_processes(state):  # zombies do not count: their parent may never reap them
        assert time.monotonic() < deadline, "processes of a launch survived SIGKILL"
        time.sleep(0.05)


@pytest.fixture
def pods_exec():
    pods = Pods()
    yield pods
    for _name, channel in pods.opened:
        channel.close()


@pytest.fixture
def driver(emulator, pods_exec, pod_state):
    return KubernetesCluster(
        api_client=emulator.client,
        namespace=NAMESPACE,
        release=RELEASE,
        ready_timeout=5,
        poll_interval=0.05,
        open_channel=pods_exec,
        master_url="http://127.0.0.1:8000",
        state_dir=str(pod_state),
    )


@pytest.fixture
def gates(tmp_path) -> Path:
    """A folder for the stand-in launcher's gate files (what lets it go on)."""
    folder = tmp_path / "gates"
    folder.mkdir()
    return folder
