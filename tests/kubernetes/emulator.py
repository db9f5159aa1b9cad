"""An in-memory Kubernetes API (kmock's KubernetesEmulator) over real HTTP on 127.0.0.1.

kmock is asyncio-based; the driver uses the official synchronous client. The emulator runs
in its own thread and event loop, and tests talk to it over HTTP like the driver does.
kmock keeps objects as plain JSON (a PATCH merges dicts, replaces lists, and null removes a
key, as a JSON merge patch does); on top of it, lists here honour `labelSelector` as an API
server does, which the original client's discovery relies on.

It runs no controllers: controllers.py plays the StatefulSet controller and the kubelets
(by hand, or continuously in a thread), release.py turns a release's rendered objects into
what a cluster makes of them.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from typing import Any

import kmock
from kmock._internal.apps import Server

RESOURCES = {
    "apps/v1/statefulsets": {"kind": "StatefulSet", "namespaced": True},
    "v1/pods": {"kind": "Pod", "namespaced": True, "subresources": ["status", "exec"]},
    "v1/events": {"kind": "Event", "namespaced": True},
    "v1/services": {"kind": "Service", "namespaced": True, "subresources": ["status"]},
    "v1/nodes": {"kind": "Node", "namespaced": False, "subresources": ["status"]},
    # The chart's Secret, which `mlbench cluster create` reads the sign-in from
    # (tests/clusters/test_install_wait.py). Namespaces cannot be emulated: kmock reads
    # /api/v1/namespaces/NAME as a namespace's resources.
    "v1/secrets": {"kind": "Secret", "namespaced": True},
}

_REQUIREMENT = re.compile(
    r"^\s*(?P<neg>!)?\s*(?P<key>[A-Za-z0-9._/-]+)\s*"
    r"(?:(?P<op>==|=|!=)\s*(?P<value>[A-Za-z0-9._-]*)"
    r"|\s+(?P<set>in|notin)\s*\((?P<values>[^)]*)\))?\s*$"
)


def selector_matches(selector: str, labels: dict[str, str] | None) -> bool:
    """Whether `labels` satisfy a label selector in the API's text form (k=v, k==v, k!=v,
    k, !k, k in (a,b), k notin (a,b), joined by commas)."""
    labels = labels or {}
    requirements = re.split(r",(?![^(]*\))", selector.strip()) if selector.strip() else []
    for text in requirements:
        match = _REQUIREMENT.match(text)
        if match is None:
            raise ValueError(f"not a label selector requirement: {text!r}")
        key, op, value, negated = match["key"], match["op"], match["value"], match["neg"]
        if negated and (op or match["set"]):
            raise ValueError(f"not a label selector requirement: {text!r}")
        if negated:
            if key in labels:
                return False
        elif op in ("=", "=="):
            if labels.get(key) != value:
                return False
        elif op == "!=":
            if labels.get(key) == value:
                return False
        elif match["set"]:
            values = {v.strip() for v in match["values"].split(",") if v.strip()}
            if (match["set"] == "in") != (labels.get(key) in values):
                return False
        elif key not in labels:
            return False
    return True


class _SelectingEmulator(kmock.KubernetesEmulator):
    """kmock's emulator, with lists filtered by `labelSelector` like an API server's."""

    async def _serve_list(self, request: Any) -> Any:
        answer = await super()._serve_list(request)
        selector = (request.params or {}).get("labelSelector")
        if selector:
            answer["items"] = [
                item
                for item in answer["items"]
                if selector_matches(selector, (item.get("metadata") or {}).get("labels"))
            ]
        return answer


class Emulator:
    """Start with `with Emulator() as api:`; `api.client` is a kubernetes ApiClient for it."""

    def __init__(self, *, metrics_api: bool = False) -> None:
        self.metrics_api = metrics_api
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._handler: Any = None
        self.url = ""

    def __enter__(self) -> Emulator:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the Kubernetes API emulator did not start")
        from kubernetes import client

        configuration = client.Configuration()
        configuration.host = self.url
        self.client = client.ApiClient(configuration)
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _serve(self) -> None:
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)

        async def main() -> None:
            async with _SelectingEmulator() as handler, Server(handler) as server:
                for resource, info in RESOURCES.items():
                    handler.resources[resource] = info
                if self.metrics_api:
                    handler.resources["metrics.k8s.io/v1beta1/pods"] = {
                        "kind": "PodMetrics",
                        "namespaced": True,
                    }
                self._handler = handler
                self.url = str(server.url).rstrip("/")
                self._loop = asyncio.get_running_loop()
                self._stop = asyncio.Event()
                self._ready.set()
                await self._stop.wait()

        asyncio.run(main())

    def requests(self) -> list[Any]:
        """Every request served so far (kmock's parsed requests: method, resource, ...)."""
        return list(self._handler)


def wait_for(predicate: Any, what: str, limit: float = 60.0) -> None:
    """Poll until `predicate()` holds: the driver works in another thread, and the test must
    act only after the driver's change reached the emulator (else it races the driver).

    The limit only bounds a hang: the wait ends as soon as the predicate holds. What it waits
    for is the emulated controller's pace (a thread of this process making HTTP calls to the
    emulated API server), which on a 2-core machine loaded 13 took more than the 10 s it
    used to be to roll two pods back to the chart's image."""
    deadline = time.monotonic() + limit
    while not predicate():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)
