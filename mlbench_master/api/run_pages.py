"""The bounded reads of GET /api/runs/: a page of the list (`limit`, `offset`) and the runs
picked by id (`id`).

Why beside the whole list: the original platform's GET /api/runs/ answers every run, and
its clients read that array, so it stays; but at ten thousand runs that answer is tens of
megabytes, and a page that shows a screenful (the runs list, compare's picker) or a few
picked runs (compare's table) must not wait for it. Both reads keep the list's order
(newest first) and the run's shape; a page comes in an envelope that says where the next
one starts, the picked runs as a plain array like the whole list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from mlbench_master.api import params
from mlbench_master.api.errors import invalid
from mlbench_master.api.models import Run
from mlbench_master.api.serializers import RunSerializer
from mlbench_master.bundles import origins

MAX_LIMIT = 1000  # runs a page may hold
MAX_IDS = 1000  # runs one request may pick
BOUNDED = ("limit", "offset", "id")


@dataclass(frozen=True)
class RunRead:
    """What a GET /api/runs/ asks for: the runs (in the list's order, already read) and,
    for a page, where it sits in the whole list."""

    runs: list[Run]
    page: dict[str, Any] | None = None


def listed() -> QuerySet[Run]:
    """Every run as the list shows it, newest first, with what its serializer reads of
    other tables (creator, origin and its trust) in the same query."""
    return origins.with_origins(Run.objects.select_related("created_by")).order_by(
        "-created_at", "-id"
    )


def read(query: Any) -> RunRead:
    """The runs a GET /api/runs/ with these query parameters answers. Without limit,
    offset or id: every run (the original's answer)."""
    ids = id_list(query)
    asked_page = any(query.get(name) not in (None, "") for name in ("limit", "offset"))
    if ids is not None:
        if asked_page:
            raise invalid("id", "picks runs by id: it cannot be combined with limit or offset")
        found = list(listed().filter(pk__in=ids))
        missing = sorted(set(ids) - {r.pk for r in found})
        if missing:
            raise invalid("id", f"no run with id {', '.join(map(str, missing[:20]))}")
        return RunRead(found)
    if not asked_page:
        return RunRead(list(listed()))
    limit = params.positive_int(query, "limit", maximum=MAX_LIMIT)
    if limit is None:
        raise invalid("limit", f"offset needs a limit: a whole number between 1 and {MAX_LIMIT}")
    offset = params.non_negative_int(query, "offset")
    count = Run.objects.count()
    runs = list(listed()[offset : offset + limit])
    after = offset + len(runs)
    page = {"count": count, "offset": offset, "limit": limit,
            "next_offset": after if after < count else None}  # fmt: skip
    return RunRead(runs, page)


def id_list(query: Any) -> list[int] | None:
    """The run ids of `id` (repeated, comma-separated, or both), or None when not given."""
    raw = [part for value in query.getlist("id") for part in value.split(",")]
    if not raw:
        return None
    ids = []
    for part in raw:
        text = part.strip()
        if not text.isdigit() or len(text) > 18:
            raise invalid("id", f"{text[:20]!r} is not a run id (a whole number)")
        ids.append(int(text))
    if len(set(ids)) > MAX_IDS:
        raise invalid("id", f"at most {MAX_IDS} runs can be picked at once")
    return list(dict.fromkeys(ids))


def body(found: RunRead) -> list[dict[str, Any]] | dict[str, Any]:
    """The answer: the runs' array, or for a page the envelope around it."""
    rows = RunSerializer(found.runs, many=True, context={}).data
    return rows if found.page is None else {**found.page, "results": rows}


# The answer's two shapes, for the OpenAPI schema (Run: the serializer's component).
_RUN = {"$ref": "#/components/schemas/Run"}
ANSWER_SCHEMA = {
    "oneOf": [
        {"type": "array", "items": _RUN},
        {
            "type": "object",
            "description": "a page (with limit)",
            "properties": {
                "count": {"type": "integer", "description": "runs in the whole list"},
                "offset": {"type": "integer", "description": "the first run's place (0: newest)"},
                "limit": {"type": "integer", "description": "the most runs a page holds"},
                "next_offset": {
                    "type": "integer",
                    "nullable": True,
                    "description": "pass as ?offset= for the next page; null: the last page",
                },
                "results": {"type": "array", "items": _RUN},
            },
            "required": ["count", "offset", "limit", "next_offset", "results"],
        },
    ]
}
