"""Fixtures of the custom-image tests: the chart's worker StatefulSet rolling on its own,
the exec seam, and a master whose every process has a driver of its own."""

from __future__ import annotations

import pytest

from tests.kubernetes.chart import NAMESPACE
from tests.kubernetes.conftest import STS
from tests.kubernetes.controllers import Controller, StatefulSetController
from tests.kubernetes.custom_image.helpers import (
    BAD_NAME,
    BROKEN,
    NO_SSHD,
    PodShell,
    driver_for,
)


@pytest.fixture
def chart_image(worker_manifest) -> str:
    return worker_manifest["spec"]["template"]["spec"]["containers"][0]["image"]


@pytest.fixture
def rollout(emulator, worker_manifest):
    """The chart's worker StatefulSet, its controller and kubelets running."""
    Controller(emulator.client, NAMESPACE).create_statefulset(worker_manifest)
    with StatefulSetController(
        emulator.client,
        NAMESPACE,
        STS,
        unpullable={BROKEN: "ImagePullBackOff", BAD_NAME: "InvalidImageName"},
        never_ready={NO_SSHD},
    ) as control:
        yield control


@pytest.fixture
def shell(emulator, pod_state):
    seam = PodShell(emulator.client, str(pod_state))
    yield seam
    seam.close()


@pytest.fixture
def master(emulator, shell, monkeypatch):
    """Every get_driver() call is a new driver, as each process of a master has its own."""
    from mlbench_master.cluster import drivers

    monkeypatch.setattr(drivers, "get_driver", lambda name=None: driver_for(emulator, shell))
