"""What the equivalence harness keeps of an answer, and how two records are compared.

Normalizing: wall-clock values (dates, durations, throughputs, bandwidths, the benchmark
clock) become a placeholder saying only that a value was there; tokens, keys, fingerprints,
pids, ports, host names and temporary paths become stable placeholders. Losses, accuracies,
perplexities, grades, states, reasons and error bodies are kept as they are.

Comparing: every path whose value differs, is missing on the new side, or exists only on
the new side (an addition). Paths that differed between two records of the SAME tree
(noise) are excluded, and listed.
"""

from __future__ import annotations

import re
import socket
from typing import Any

# Keys whose value depends on the wall clock, a random key or the process: kept as "<type>"
# (present) or None. A predictions file's sha256 covers its `elapsed` (the clock): the
# files are compared by their arrays instead (script.predictions_content).
_VOLATILE_KEY = re.compile(
    r"(_at$|^date$|^since$|^as_of$|elapsed|time_to_target|_per_sec|per_second|seconds"
    r"|duration|^time$|_time$|^clock|latency|_mbps$|_us$|throughput|^cost$|^pid$|^pids$"
    r"|hostname|job_id|(^|_)token$|audit_id|fingerprint|public_key|signature|^digest$|^key$"
    r"|^launch_id$|^sample_seed$|^origin$|^exported_by$|^imported_by$|^uid$|^wall|^host$"
    r"|^started$|comm_share|predictions_sha256|^sha256$)"
)
# Metric names whose values are wall-clock measurements: the count is kept, not the values.
_VOLATILE_METRIC = re.compile(
    r"(per_sec|elapsed|time|mbps|latency|_us$|seconds|throughput|cpu_|memory_|comm_seconds)"
)
_DATE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?")
_URL = re.compile(r"https?://(127\.0\.0\.1|localhost|\[::1\]):\d+")
_WORKER_TOKEN = re.compile(r"mlbr_\d+_[0-9a-fA-F]+")
_HEX_TOKEN = re.compile(r"\b[0-9a-f]{40}\b")
_FINGERPRINT = re.compile(r"\b[0-9a-f]{4}(:[0-9a-f]{4}){3}\b")
_TMP = re.compile(r"/tmp/[A-Za-z0-9._-]+")
_PRTERUN = re.compile(r"prterun-[\w.-]+?-\d+@")  # Open MPI's job name holds its pid
_TIME_MS = re.compile(r'"time_ms": [0-9.e+]+')  # an MLPerf log line's wall clock
_PLACEHOLDER = re.compile(r"^<[a-z]+>$")
_SLOT = re.compile(r"\bmlb-[0-9a-f]{6}-")  # the local cluster's slot names, per master


class Normalizer:
    """Placeholders for one tree's run: its home folder, tree folder and interpreter."""

    def __init__(self, replacements: dict[str, str]) -> None:
        # Longest first, so a home inside /tmp is replaced before /tmp/... is.
        self.replacements = sorted(replacements.items(), key=lambda kv: -len(kv[0]))
        self.hostname = socket.gethostname()

    def text(self, value: str) -> str:
        for raw, placeholder in self.replacements:
            if raw:
                value = value.replace(raw, placeholder)
        value = _DATE.sub("<date>", value)
        value = _TIME_MS.sub('"time_ms": "<ms>"', value)
        value = _URL.sub("<master>", value)
        value = _WORKER_TOKEN.sub("<worker-token>", value)
        value = _HEX_TOKEN.sub("<token>", value)
        value = _FINGERPRINT.sub("<fingerprint>", value)
        value = _TMP.sub("<tmp>", value)
        value = _SLOT.sub("mlb-<slots>-", value)
        value = _PRTERUN.sub("prterun-<pid>@", value)
        if self.hostname:
            value = value.replace(self.hostname, "<hostname>")
        return value

    def value(self, value: Any, key: str = "") -> Any:
        if isinstance(value, str) and _PLACEHOLDER.match(value):
            return value  # normalized already (a record is normalized again when compared)
        if key and _VOLATILE_KEY.search(key):
            return None if value is None else f"<{type(value).__name__}>"
        if isinstance(value, dict):
            return {self.text(str(k)): self.value(v, str(k)) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, str):
            return self.text(value)
        return value

    def metrics(self, body: Any) -> Any:
        """A metric read `{name: [{date, value, ...}]}`: dates dropped, wall-clock metrics'
        values replaced by a placeholder, the rest of each point normalized."""
        if not isinstance(body, dict):
            return self.value(body)
        out: dict[str, Any] = {}
        for name, points in body.items():
            if not isinstance(points, list):
                out[name] = self.value(points, name)
                continue
            volatile = bool(_VOLATILE_METRIC.search(name))
            kept = []
            for point in points:
                if not isinstance(point, dict):
                    kept.append(self.value(point))
                    continue
                item = {k: self.value(v, k) for k, v in point.items() if k != "value"}
                if "value" in point:
                    item["value"] = "<number>" if volatile else point["value"]
                kept.append(item)
            out[name] = kept
        return out

    def lines(self, text: str) -> list[str]:
        return [self.text(line.rstrip()) for line in text.splitlines()]


# -- comparing


def walk(old: Any, new: Any, path: str = "") -> list[tuple[str, str, Any, Any]]:
    """Every difference between two normalized records: (path, kind, old, new) where kind is
    `changed`, `missing` (only in old) or `added` (a key only in new)."""
    if isinstance(old, dict) and isinstance(new, dict):
        found = []
        for key in old:
            sub = f"{path}/{key}"
            if key not in new:
                found.append((sub, "missing", old[key], None))
            else:
                found += walk(old[key], new[key], sub)
        found += [(f"{path}/{key}", "added", None, new[key]) for key in new if key not in old]
        return found
    if isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            return [(path, "changed", f"<list of {len(old)}>", f"<list of {len(new)}>")]
        found = []
        for index, (a, b) in enumerate(zip(old, new, strict=True)):
            found += walk(a, b, f"{path}[{index}]")
        return found
    if old == new and type(old) is type(new):
        return []
    return [(path, "changed", old, new)]


def noisy(path: str, noise: set[str]) -> bool:
    """Whether `path` is, or lies under, a path that differed between same-tree records."""
    return any(path == p or path.startswith(p + "/") or path.startswith(p + "[") for p in noise)


def noise_paths(first: dict, second: dict) -> set[str]:
    """The paths that differ between two records of the same tree (any kind)."""
    return {path for path, _kind, _a, _b in walk(first, second)}


def compare(
    old: dict, new: dict, noise: set[str]
) -> tuple[list[tuple[str, str, Any, Any]], list[tuple[str, str, Any, Any]], list[str]]:
    """(failures, additions, excluded noise paths that were met)."""
    failures, additions, met = [], [], set()
    for path, kind, a, b in walk(old, new):
        if noisy(path, noise):
            met.add(path)
        elif kind == "added":
            additions.append((path, kind, a, b))
        else:
            failures.append((path, kind, a, b))
    return failures, additions, sorted(met)


def short(value: Any, width: int = 300) -> str:
    import json

    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= width else text[: width - 3] + "..."
