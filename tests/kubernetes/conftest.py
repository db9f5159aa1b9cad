"""Fixtures for the Kubernetes driver: the API emulator, the chart's worker StatefulSet, and
exec channels that stand in for pods (the emulator cannot serve exec)."""

from __future__ import annotations

import subprocess
import threading
from dataclasses import dataclass, field

import pytest

from mlbench_master.cluster.base import RunSpec
from mlbench_master.cluster.kubernetes import KubernetesCluster, worker_statefulset_name
from tests.kubernetes.chart import NAMESPACE, RELEASE, find, manifests
from tests.kubernetes.emulator import Controller, Emulator

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
    """A run as drivers see it (cluster.base.RunSpec); the tests' defaults: id 7, no limit."""
    fields.setdefault("id", 7)
    fields.setdefault("max_bandwidth", 0)
    return RunSpec(**fields)


class LocalChannel:
    """A command that really runs, here, as a local process (stands in for pod 0's mpirun)."""

    def __init__(self, command: list[str]) -> None:
        self._proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._chunks: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._readers = [
            threading.Thread(target=self._pump, args=(self._proc.stdout, "stdout"), daemon=True),
            threading.Thread(target=self._pump, args=(self._proc.stderr, "stderr"), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _pump(self, pipe, name):
        for line in pipe:
            with self._lock:
                self._chunks.append((name, line))

    def read(self, timeout):
        for reader in self._readers:
            reader.join(timeout / 2)
        with self._lock:
            chunks, self._chunks = self._chunks, []
        return chunks

    def write(self, text):
        self._proc.stdin.write(text)
        self._proc.stdin.flush()

    def done(self):
        with self._lock:
            pending = bool(self._chunks)
        return (
            self._proc.poll() is not None
            and not any(r.is_alive() for r in self._readers)
            and not pending
        )

    def status(self):
        return self._proc.wait(), ""

    def close(self):
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()


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


@dataclass
class Pods:
    """The exec seam for tests: records every (pod, command); runs launches locally."""

    calls: list[tuple[str, list[str]]] = field(default_factory=list)
    answers: dict[str, tuple[int, str] | Exception] = field(default_factory=dict)

    def __call__(self, pod: str, command: list[str]):
        self.calls.append((pod, command))
        if "mlbench-launch" in command:
            return LocalChannel(command)
        for needle, answer in self.answers.items():
            if needle in " ".join(command):
                if isinstance(answer, Exception):
                    raise answer
                return CannedChannel(*answer)
        return CannedChannel(0, "")

    def scripts(self, pod: str | None = None) -> list[str]:
        return [" ".join(c) for p, c in self.calls if pod is None or p == pod]


@pytest.fixture
def pods_exec():
    return Pods()


@pytest.fixture
def driver(emulator, pods_exec):
    return KubernetesCluster(
        api_client=emulator.client,
        namespace=NAMESPACE,
        release=RELEASE,
        ready_timeout=5,
        poll_interval=0.05,
        open_channel=pods_exec,
        master_url="http://127.0.0.1:8000",
    )
