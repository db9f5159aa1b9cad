"""When a run's worker pods count as ready, and what to say when they do not get there.

A pod is one of the run's workers once it is Ready *and* was made from the template the
run asked for (its limits, its image): a pod still running the previous template is Ready
too, and is only waiting its turn in the rolling update. The reasons name the pod that
holds the run up and say what a person can do about it (the image that cannot be pulled,
the scheduler's message, what a custom image must provide). Pure functions over the
official client's pod objects; the events are read by the caller.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mlbench_master.cluster.kubernetes import images
from mlbench_master.cluster.kubernetes.resources import has_limits, is_ready

# What a custom image must do to become Ready in the chart's worker pods (the readiness
# probe is a TCP check of port 22, and mpirun reaches the other pods over ssh).
CUSTOM_IMAGE_HINT = (
    "a custom image must start sshd on port 22 with the release's key, and have sh and "
    "mpirun, like the mlbench worker image: build it FROM mlbench/mlbench_worker"
)


@dataclass(frozen=True)
class Target:
    """What the run's pods must run with: the worker container's limits and image."""

    limits: dict[str, Any]
    image: str
    custom: bool


def made_for(pod: Any, target: Target) -> bool:
    """Whether the pod was made from the template the run asked for."""
    return images.pod_image(pod) == target.image and has_limits(pod, target.limits)


def ready_for(pod: Any, target: Target) -> bool:
    return is_ready(pod) and made_for(pod, target)


def blocking(waiting: list[str], pods: dict[str, Any], target: Target) -> str:
    """The pod to name among those still `waiting`: in a rolling update the ones not
    replaced yet only wait their turn, so the first one already made for the run (or not
    created yet) is what holds it up."""
    made = [n for n in waiting if n not in pods or made_for(pods[n], target)]
    return (made or waiting)[0]


def not_ready_reason(
    name: str, pod: Any | None, target: Target, latest_event: Callable[[str], Any | None]
) -> str:
    """Why pod `name` is not one of the run's Ready workers; `latest_event(object name)`
    gives the newest event about an object (the StatefulSet's for a pod never created)."""
    if pod is None:
        event = latest_event(name.rsplit("-", 1)[0])
        detail = event.message if event is not None and event.message else "not created yet"
        return f"{name} not created: {detail}"
    phase = (pod.status.phase if pod.status else None) or "Unknown"
    have = images.pod_image(pod)
    if have != target.image:
        return f"{name} {phase}: still running image {have!r} (being replaced by {target.image!r})"
    if not has_limits(pod, target.limits):
        return f"{name} {phase}: still running with the previous limits (being replaced)"
    problem = images.pull_problem(pod)
    if problem is not None:
        reason, message = problem
        text = f"{name} {phase}: image {target.image!r} cannot be pulled: {reason}: {message}"
        return text.rstrip(": ")
    event = latest_event(name)
    if event is not None and event.message:
        detail = f"{name} {phase}: {event.message.strip()}"
    else:
        detail = f"{name} {phase}: not Ready"
        for status in (pod.status.container_statuses or []) if pod.status else []:
            waiting = status.state.waiting if status.state else None
            if waiting is not None and waiting.reason:
                detail = f"{name} {phase}: {waiting.reason}: {waiting.message or ''}".rstrip(": ")
                break
    if target.custom and phase == "Running":
        detail += f" (image {target.image!r}: {CUSTOM_IMAGE_HINT})"
    return detail


def hopeless_image(pods: list[Any], target: Target) -> str | None:
    """Why no wait can bring the run's image, when a pod made for it says so."""
    for pod in pods:
        problem = images.pull_problem(pod)
        if problem is None or problem[0] not in images.HOPELESS:
            continue
        if images.pod_image(pod) == target.image:
            reason, message = problem
            text = f"worker image {target.image!r} cannot be used: {pod.metadata.name}: "
            return f"{text}{reason}: {message}".rstrip(": ")
    return None
