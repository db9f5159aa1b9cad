"""Worker pods a run lost, in Kubernetes' own words: the first cause of a failed launch
that the ranks' own reports cannot give.

mpirun runs in pod 0. When another worker pod goes (deleted, evicted, its node lost,
replaced by the StatefulSet under the same name) or its worker container is restarted (out
of memory), mpirun only sees a rank or a daemon vanish, and the rank that complains first
is whichever noticed. Kubernetes knows better, so the driver writes down each rank's pod as
it was at launch (`seen`: uid, node, restarts of the worker container), keeps it in the
run's launch record (a re-attached master reads it back), and compares the pods with it
when the launch fails. Pure functions over the official client's objects, so the wording
and the order can be tested without a cluster; pods.py asks the API.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from mlbench_master.cluster.failures import first_cause
from mlbench_master.cluster.kubernetes.names import WORKER_CONTAINER
from mlbench_master.cluster.kubernetes.resources import event_time

# The key of the launch record's "kubernetes" entry that holds what `seen` wrote down.
RECORD_KEY = "workers"
_LATEST = dt.datetime.max.replace(tzinfo=dt.UTC)  # a loss with no time sorts after the others


@dataclass(frozen=True)
class Seen:
    """A worker pod as the launch found it."""

    pod: str
    uid: str
    node: str
    restarts: int

    def fields(self) -> dict[str, Any]:
        return {"pod": self.pod, "uid": self.uid, "node": self.node, "restarts": self.restarts}


@dataclass(frozen=True)
class Loss:
    """What happened to one pod, and when Kubernetes says it happened (None: it does not)."""

    pod: str
    what: str
    when: dt.datetime | None


def seen(pods: Iterable[Any]) -> list[dict[str, Any]]:
    """The launch record's entry for `pods` (the official client's V1Pod objects)."""
    return [
        Seen(
            pod=pod.metadata.name,
            uid=pod.metadata.uid or "",
            node=(pod.spec.node_name if pod.spec else None) or "",
            restarts=_restarts(pod),
        ).fields()
        for pod in pods
    ]


def from_record(entries: Any) -> list[Seen]:
    """The pods a stored launch record names; [] for a record from before they were kept
    (or one that is not a list of such entries: nothing then is compared)."""
    found = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or not entry.get("pod"):
            continue
        try:
            restarts = int(entry.get("restarts") or 0)
        except (TypeError, ValueError):
            restarts = 0
        found.append(
            Seen(
                str(entry["pod"]),
                str(entry.get("uid") or ""),
                str(entry.get("node") or ""),
                restarts,
            )
        )
    return found


def find(
    recorded: Iterable[Seen],
    pods: Iterable[Any],
    events: Callable[[str], list[Any]],
    launcher: str = "",
) -> list[Loss]:
    """The recorded pods that were lost or whose worker container ended since, earliest
    first (by the time Kubernetes recorded; those it gives no time come last, in the
    order recorded). `events(name)` lists the events of pods of that name: a pod that is
    gone is only known by them. `launcher` is pod 0, where mpirun ran: named as such."""
    now = {pod.metadata.name: pod for pod in pods}
    found = []
    for pod_seen in recorded:
        title = f"worker pod {pod_seen.pod}"
        if pod_seen.pod == launcher:
            title += ", where mpirun ran,"
        loss = _lost(pod_seen, now.get(pod_seen.pod), events, title)
        if loss is not None:
            found.append(loss)
    return sorted(found, key=lambda loss: loss.when or _LATEST)


def reason(losses: list[Loss]) -> str | None:
    """The losses as the head of a FAILED reason: the first, the others after "then:"."""
    return first_cause([loss.what for loss in losses]) if losses else None


def _lost(
    seen_pod: Seen, pod: Any | None, events: Callable[[str], list[Any]], title: str
) -> Loss | None:
    on = f"node {seen_pod.node}" if seen_pod.node else "a node not recorded"
    if pod is None or (seen_pod.uid and pod.metadata.uid != seen_pod.uid):
        # Gone, or gone and made again: only its events are left to say why.
        event = _last_event(events(seen_pod.pod), seen_pod)
        said = f"; its last event: {event.reason}: {event.message}" if event is not None else ""
        if pod is None:
            what = f"{title} was deleted (it ran on {on}{said})"
            when = event_time(event) if event is not None else None
        else:
            what = f"{title} was deleted and replaced by a new pod (the old one ran on {on}{said})"
            when = event_time(event) if event is not None else pod.metadata.creation_timestamp
        return Loss(seen_pod.pod, what, when)
    status = pod.status
    disruption = _condition(pod, "DisruptionTarget")
    words = f"{disruption.reason}: {disruption.message}" if disruption is not None else ""
    if pod.metadata.deletion_timestamp is not None:
        asked = pod.metadata.deletion_timestamp - dt.timedelta(
            seconds=pod.metadata.deletion_grace_period_seconds or 0
        )
        said = f"; {words}" if words else ""
        return Loss(seen_pod.pod, f"{title} is being deleted (on {on}{said})", asked)
    pod_reason = (status.reason if status else None) or ""
    pod_message = ((status.message if status else None) or "").strip()
    phase = (status.phase if status else None) or "Unknown"
    if pod_reason or phase != "Running":
        when = _stopped_at(pod)
        if pod_reason == "Evicted":
            return Loss(seen_pod.pod, f"{title} was evicted from {on}: {pod_message}", when)
        if pod_reason == "NodeLost":
            node = f"its node {seen_pod.node}".strip()
            return Loss(seen_pod.pod, f"{title} lost {node}: {pod_message}", when)
        told = ": ".join(w for w in (pod_reason, pod_message) if w) or words
        return Loss(
            seen_pod.pod, f"{title} is {phase} (on {on})" + (f": {told}" if told else ""), when
        )
    return _container_ended(seen_pod, pod)


def _container_ended(seen_pod: Seen, pod: Any) -> Loss | None:
    """The worker container ended since the launch (restarted, or not yet); None if not."""
    status = _worker_status(pod)
    if status is None:
        return None
    title = f"the worker container of pod {seen_pod.pod}"
    restarts = (status.restart_count or 0) - seen_pod.restarts
    current = status.state.terminated if status.state else None
    if current is not None:
        return Loss(seen_pod.pod, f"{title} ended: {_termination(current)}", current.finished_at)
    if restarts <= 0:
        return None
    last = status.last_state.terminated if status.last_state else None
    times = f" {restarts} times, the last" if restarts > 1 else ""
    if last is None:
        return Loss(seen_pod.pod, f"{title} was restarted{times}", None)
    return Loss(
        seen_pod.pod, f"{title} was restarted{times}: {_termination(last)}", last.finished_at
    )


def _termination(terminated: Any) -> str:
    """`OOMKilled (exit code 137) at 2026-11-26T10:00:03Z: message`, as the kubelet says it."""
    text = terminated.reason or "ended"
    if terminated.exit_code is not None:
        text += f" (exit code {terminated.exit_code})"
    if terminated.finished_at is not None:
        text += f" at {_stamp(terminated.finished_at)}"
    message = (terminated.message or "").strip()
    return f"{text}: {message}" if message else text


def _stamp(when: dt.datetime) -> str:
    """A time as Kubernetes writes it (RFC 3339, UTC)."""
    if when.tzinfo is not None:
        when = when.astimezone(dt.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _stopped_at(pod: Any) -> dt.datetime | None:
    """When a pod that no longer runs stopped: the disruption Kubernetes recorded, else the
    end of its worker container, else when it stopped being Ready."""
    disruption = _condition(pod, "DisruptionTarget")
    if disruption is not None and disruption.last_transition_time is not None:
        return disruption.last_transition_time
    status = _worker_status(pod)
    terminated = status.state.terminated if status is not None and status.state else None
    if terminated is not None and terminated.finished_at is not None:
        return terminated.finished_at
    ready = _condition(pod, "Ready", "False")
    return ready.last_transition_time if ready is not None else None


def _condition(pod: Any, kind: str, status: str = "True") -> Any | None:
    conditions = (pod.status.conditions if pod.status else None) or []
    return next((c for c in conditions if c.type == kind and c.status == status), None)


def _worker_status(pod: Any) -> Any | None:
    statuses = (pod.status.container_statuses if pod.status else None) or []
    return next((s for s in statuses if s.name == WORKER_CONTAINER), None)


def _restarts(pod: Any) -> int:
    status = _worker_status(pod)
    return int(status.restart_count or 0) if status is not None else 0


def _last_event(events: list[Any], seen_pod: Seen) -> Any | None:
    """The event that says most of why a pod that is gone went: its latest warning (an
    eviction, a node's taint), else its latest event (the kubelet stopping its container).
    Only events of that pod (its uid): the new pod of that name has events of its own."""
    mine = [
        e
        for e in events
        if e.involved_object is not None
        and e.involved_object.name == seen_pod.pod
        and (not seen_pod.uid or e.involved_object.uid == seen_pod.uid)
    ]
    warnings = [e for e in mine if e.type == "Warning"]
    return max(warnings or mine, key=event_time) if mine else None
