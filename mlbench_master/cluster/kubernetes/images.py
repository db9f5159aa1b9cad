"""Which image the worker pods run for a run (the open division's `custom_image_name`).

All worker pods come from one StatefulSet template, so a run's custom image is set on the
template and undone after the run. What to undo to is written on the StatefulSet itself
(two annotations, names.py): a master that dies mid-run leaves that record behind, and the
next process that looks (reconciliation, a later run's prepare, a cancel from the API)
puts the chart's image back. The record is trusted only while the template still holds
the custom image it names: an image someone else set since (`helm upgrade`, `kubectl set
image`) is theirs, and is never overwritten by a restore.

Pure functions over the StatefulSet's JSON and the client's pod objects, so the decisions
are testable without a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mlbench_master.cluster.kubernetes.names import (
    CUSTOM_IMAGE_ANNOTATION,
    ORIGINAL_IMAGE_ANNOTATION,
    WORKER_CONTAINER,
)

KEYS = (ORIGINAL_IMAGE_ANNOTATION, CUSTOM_IMAGE_ANNOTATION)

# Container waiting reasons that mean "the image cannot be had" (kubelet's names).
PULL_ERRORS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "RegistryUnavailable",
        "ImageInspectError",
    }
)
# Of those, the ones no retry of the kubelet can cure: waiting longer is pointless.
HOPELESS = frozenset({"InvalidImageName", "ErrImageNeverPull"})


@dataclass(frozen=True)
class ImagePlan:
    """The worker image for a run, the one to go back to, and the annotation changes."""

    image: str
    original: str
    # name -> value to set, or None to remove; only what differs from the StatefulSet now.
    annotations: dict[str, str | None] = field(default_factory=dict)

    @property
    def custom(self) -> bool:
        return self.image != self.original


def plan(current: str, annotations: Mapping[str, str] | None, custom: str) -> ImagePlan:
    """The worker image for a run asking for `custom` ("" for the chart's image).

    `current` is the template's image now and `annotations` the StatefulSet's.
    """
    annotations = annotations or {}
    recorded = annotations.get(ORIGINAL_IMAGE_ANNOTATION)
    placed = annotations.get(CUSTOM_IMAGE_ANNOTATION)
    original = recorded if recorded and placed == current else current
    image = custom.strip() or original
    wanted: dict[str, str | None] = (
        {ORIGINAL_IMAGE_ANNOTATION: original, CUSTOM_IMAGE_ANNOTATION: image}
        if image != original
        else dict.fromkeys(KEYS)
    )
    changes = {k: v for k, v in wanted.items() if annotations.get(k) != v}
    return ImagePlan(image=image, original=original, annotations=changes)


def from_record(launch: Mapping[str, Any] | None) -> dict[str, str]:
    """The annotations a launch record stands for (a copy kept with the run, used when the
    StatefulSet's own were removed, e.g. by hand)."""
    image = ((launch or {}).get("kubernetes") or {}).get("image") or {}
    if not (image.get("original") and image.get("custom")):
        return {}
    return {
        ORIGINAL_IMAGE_ANNOTATION: str(image["original"]),
        CUSTOM_IMAGE_ANNOTATION: str(image["custom"]),
    }


def record(annotations: Mapping[str, str] | None) -> dict[str, str] | None:
    """What the launch record keeps of the annotations (None when no custom image is set)."""
    annotations = annotations or {}
    if not all(annotations.get(k) for k in KEYS):
        return None
    return {
        "custom": annotations[CUSTOM_IMAGE_ANNOTATION],
        "original": annotations[ORIGINAL_IMAGE_ANNOTATION],
    }


def pod_image(pod: Any) -> str | None:
    """The image the pod's worker container was created with."""
    container = next((c for c in pod.spec.containers if c.name == WORKER_CONTAINER), None)
    return container.image if container is not None else None


def pull_problem(pod: Any) -> tuple[str, str] | None:
    """(reason, message) when the worker container waits for an image it cannot get."""
    for status in (pod.status.container_statuses or []) if pod.status else []:
        if status.name != WORKER_CONTAINER:
            continue
        waiting = status.state.waiting if status.state else None
        if waiting is not None and waiting.reason in PULL_ERRORS:
            return waiting.reason, (waiting.message or "").strip()
    return None
