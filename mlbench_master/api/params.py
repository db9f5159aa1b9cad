"""Query-parameter parsing shared by the views: one rule, one message per parameter."""

from __future__ import annotations

import datetime as dt

from mlbench_master.api.errors import invalid
from mlbench_master.common.dates import parse_iso_datetime


def since(params: dict) -> dt.datetime | None:
    raw = params.get("since")
    if raw in (None, ""):
        return None
    value = parse_iso_datetime(raw)
    if value is None:
        raise invalid(
            "since",
            f"{raw[:40]!r} is not an ISO 8601 date; use e.g. 2024-05-01T12:00:00Z "
            "or 2024-05-01T12:00:00.123456+00:00",
        )
    return value


def positive_int(params: dict, name: str, maximum: int = 10**7) -> int | None:
    raw = params.get(name)
    if raw in (None, ""):
        return None
    try:
        value = int(raw)
    except (TypeError, ValueError):
        value = 0
    if not 1 <= value <= maximum:
        raise invalid(name, f"{str(raw)[:20]!r} is not a whole number between 1 and {maximum}")
    return value


def non_negative_int(params: dict, name: str) -> int:
    raw = params.get(name)
    if raw in (None, ""):
        return 0
    try:
        value = int(raw)
    except (TypeError, ValueError):
        value = -1
    if not 0 <= value <= 2**62:
        raise invalid(name, f"{str(raw)[:20]!r} is not a whole number of at least 0")
    return value


def choice(params: dict, name: str, options: tuple[str, ...], default: str) -> str:
    raw = params.get(name) or default
    if raw not in options:
        raise invalid(name, f"{raw[:20]!r} is not one of {', '.join(options)}")
    return raw


def name_list(params: dict, name: str) -> list[str] | None:
    raw = params.get(name)
    if raw in (None, ""):
        return None
    names = [n.strip() for n in raw.split(",") if n.strip()]
    if not names or len(names) > 1000 or any("\x00" in n for n in names):
        raise invalid(name, "must be a comma-separated list of metric names")
    return names
