"""The API's dates: read in any ISO 8601 form a client sends, written in one form.

Here rather than in api/ because bundles, the frozen-results rules and the metric reads
write the same dates as the API does, and lower rooms never import the HTTP door.
"""

from __future__ import annotations

import datetime as dt
import re

from django.utils.dateparse import parse_datetime

# '+' in an unencoded query string arrives as a space: "...:44 00:00" means "+00:00".
_SPACE_OFFSET = re.compile(r" (\d{2}:?\d{2})$")


def parse_iso_datetime(text: str) -> dt.datetime | None:
    """ISO 8601 with or without fractional seconds; 'Z' or an offset; naive means UTC."""
    text = _SPACE_OFFSET.sub(r"+\1", text.strip())
    try:
        value = parse_datetime(text)
    except ValueError:
        value = None
    if value is None:
        try:
            value = dt.datetime.fromisoformat(text)
        except ValueError:
            return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value


def as_utc(value: dt.datetime | str) -> dt.datetime:
    """A database date as an aware UTC datetime (SQLite's aggregates give strings)."""
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    if value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC)


def iso(value: dt.datetime | str) -> str:
    """The API's date format: ISO 8601, UTC, microseconds, 'Z' (as the seeds show)."""
    if isinstance(value, str) and value.endswith("Z"):
        return value  # already in this form (runs/metric_reads.py writes it in SQL)
    if not isinstance(value, dt.datetime) or value.utcoffset() != _ZERO:
        value = as_utc(value)
    return value.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


_ZERO = dt.timedelta(0)
