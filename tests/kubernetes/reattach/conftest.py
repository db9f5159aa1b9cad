"""Fixtures of the re-attach tests: the chart's worker pods Ready, and a master whose
every process has a driver of its own (the gates folder is tests/kubernetes/conftest.py's)."""

from __future__ import annotations

import pytest

from tests.kubernetes.conftest import STS
from tests.kubernetes.reattach.helpers import restarted_driver


@pytest.fixture
def workers(controller):
    controller.make_ready(controller.create_pods(STS))
    return controller


@pytest.fixture
def master(emulator, pods_exec, pod_state, monkeypatch):
    """Every get_driver() call is a new driver, as each process of a master has its own."""
    from mlbench_master.cluster import drivers

    monkeypatch.setattr(
        drivers, "get_driver", lambda name=None: restarted_driver(emulator, pods_exec, pod_state)
    )
