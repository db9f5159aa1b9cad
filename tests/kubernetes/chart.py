"""Rendering the helm chart offline (helm-python-sdk: Helm's own Go code as a library)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parents[2] / "charts" / "mlbench"
RELEASE = "rel"
NAMESPACE = "bench"


def render(
    values: dict[str, Any] | None = None, *, release: str = RELEASE, namespace: str = NAMESPACE
) -> dict[str, str]:
    """Template path -> rendered text, as `helm install` would produce on a first install."""
    import helm_python as helm

    with helm.Chart.load(str(CHART)) as chart:
        return chart.render(values or {}, name=release, namespace=namespace, is_install=True)


def manifests(
    values: dict[str, Any] | None = None, *, release: str = RELEASE, namespace: str = NAMESPACE
) -> list[dict[str, Any]]:
    """Every Kubernetes object the chart renders (NOTES.txt excluded)."""
    objects = []
    for path, text in sorted(render(values, release=release, namespace=namespace).items()):
        if path.endswith("NOTES.txt"):
            continue
        objects += [doc for doc in yaml.safe_load_all(text) if doc]
    return objects


def find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    matches = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind}/{name}: {len(matches)} rendered"
    return matches[0]


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}
