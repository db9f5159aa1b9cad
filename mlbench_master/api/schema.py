"""OpenAPI schema hooks (drf-spectacular)."""

from __future__ import annotations


def only_canonical_paths(endpoints: list, **kwargs: object) -> list:
    """Drop the slash-less aliases (e.g. `POST /api/metrics` from the seed documents): the
    schema lists each endpoint once, at its canonical path ending in '/'."""
    return [e for e in endpoints if e[0].endswith("/")]
