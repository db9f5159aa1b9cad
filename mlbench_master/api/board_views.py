"""GET /api/results/: the results board (results/board.py builds it; this only parses
the filters, each checked so a wrong one is named rather than silently matching nothing,
and the page: `limit` and `offset` ask for a slice of the ranked entries, in an envelope
as GET /api/runs/'s pages are; without them, the whole board, as it always was).
GET /api/results/algorithms/: algorithms ranked by their study scores
(results/algorithm_board.py builds it)."""

from __future__ import annotations

import re

from django.http import HttpResponse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mlbench_master.api import params
from mlbench_master.api.errors import error_responses, invalid
from mlbench_master.api.models import Run
from mlbench_master.results import algorithm_board, board
from mlbench_worker.shared import algorithm_catalogue, catalogue, implementation_catalogue

CHOICES = {
    "division": board.DIVISIONS,
    "measured": board.MEASURES,
    "data": board.DATA,
    "evaluation": board.EVALUATIONS,
}
TEXT = ("origin", "hardware", "algorithm", "implementation", "network", "backend")
NUMBERS = ("workers", "seed")

BOARD_SCHEMA = {
    "type": "object",
    "description": (
        "installation (this master's public_key and fingerprint), filters (those applied), "
        "count (entries), sections: one per task, division, measure, data (real or "
        "synthetic) and evaluation (evaluated or self-reported), each with its label and its "
        "entries ranked apart (rank null and unranked saying why for entries not ranked). An "
        "entry is a series' runs with one worker count, or one run: its dimensions (hardware, "
        "workers, algorithm, implementation, network, backend, seeds), statistics (the series "
        "statistics' group), cost, origin (kind local or imported, fingerprint), evaluation, "
        "score, links (run and series pages, API, bundle and MLPerf log downloads) and runs. "
        "With limit (and offset): only the entries of that slice of the whole, in their "
        "sections, and offset, limit, next_offset (null on the last page) and values (each "
        "filter's values among the entries matched)."
    ),
}


def parse(query: dict) -> board.Filters:
    """The filters of a request: every one optional; a value no entry could have is a 400."""
    found: dict = {}
    task = query.get("task") or None
    if task is not None and task not in catalogue.TASKS:
        raise invalid("task", f"{task[:40]!r} is not a task; known: {', '.join(catalogue.TASKS)}")
    found["task"] = task
    for name, options in CHOICES.items():
        raw = query.get(name) or None
        if raw is not None and raw not in options:
            raise invalid(name, f"{raw[:40]!r} is not one of {', '.join(options)}")
        found[name] = raw
    for name in TEXT:
        raw = query.get(name) or None
        if raw is not None and (len(raw) > 300 or "\x00" in raw):
            raise invalid(name, "must be at most 300 characters of text")
        if raw is not None and (refused := _refusal(name, raw)):
            raise invalid(name, f"{raw[:40]!r} is not {refused}")
        found[name] = raw
    for name in NUMBERS:
        found[name] = params.positive_int(query, name) if name == "workers" else _seed(query)
    return board.Filters(**found)


# What an entry's text dimensions can be, so a value none could have is named (a 400) and
# not answered with an empty board: the catalogues' names, and the shapes board.py writes.
ORIGIN_WORDS = ("local", "imported", *board.TRUST)
FINGERPRINT = re.compile(r"[0-9a-f]{4}(:[0-9a-f]{4}){3}", re.IGNORECASE)
HARDWARE = re.compile(r"(CPU|GPU) .+, \d+(\.\d+)? cores? per worker", re.IGNORECASE)
NETWORK = re.compile(r"\d+ Mbit/s(, \d+(\.\d+)? ms latency)?", re.IGNORECASE)


def _refusal(name: str, raw: str) -> str | None:
    """What the text filter `name` accepts, in words, when `raw` is none of it; else None.
    Names compare ignoring case, as board._matches does."""
    value = raw.strip().lower()
    if name == "origin":
        if value in ORIGIN_WORDS or FINGERPRINT.fullmatch(value):
            return None
        return f"one of {', '.join(ORIGIN_WORDS)} or an installation's fingerprint (abcd:0123:4567:89ef)"
    named = {
        "algorithm": list(algorithm_catalogue.ALGORITHMS),
        "implementation": list(implementation_catalogue.IMPLEMENTATIONS),
        "backend": [*Run.BACKENDS, catalogue.CUSTOM_BACKEND],
    }
    if name in named:
        known = list(dict.fromkeys([*named[name], *_stored(name)]))
        return None if value in (k.lower() for k in known) else f"one of {', '.join(known)}"
    shapes = {
        "hardware": (HARDWARE, "'CPU MODEL, N cores per worker' (or GPU MODEL, ...)"),
        "network": (NETWORK, "'N Mbit/s' or 'N Mbit/s, L ms latency'"),
    }
    shape, words = shapes[name]
    return None if shape.fullmatch(raw.strip()) else f"a {name} as the board writes it: {words}"


def _stored(name: str) -> list[str]:
    """The values of the run field `name` that stored runs have beyond the catalogue's (an
    imported run's, a run of an algorithm this master no longer lists): each may head an
    entry, so each is a filter (at most 50, in the refusal's list)."""
    values = Run.objects.exclude(**{name: ""}).values_list(name, flat=True).distinct()
    return sorted(str(v) for v in values[:50])


def _seed(query: dict) -> int | None:
    if query.get("seed") in (None, ""):
        return None
    return params.non_negative_int(query, "seed")


MAX_LIMIT = 1000  # entries a page may hold


def page_of(query: dict) -> board.Page | None:
    """The slice a request asks for (`limit`, `offset`), or None for the whole board."""
    if all(query.get(name) in (None, "") for name in ("limit", "offset")):
        return None
    limit = params.positive_int(query, "limit", maximum=MAX_LIMIT)
    if limit is None:
        raise invalid("limit", f"offset needs a limit: a whole number between 1 and {MAX_LIMIT}")
    return board.Page(limit, params.non_negative_int(query, "offset"))


def _parameters() -> list[OpenApiParameter]:
    out = [OpenApiParameter("task", str, description="a task of the catalogue")]
    out += [OpenApiParameter(n, str, enum=list(o)) for n, o in CHOICES.items()]
    out += [
        OpenApiParameter(
            n,
            str,
            description=(
                "local, imported, or an installation's fingerprint"
                if n == "origin"
                else "exact text of the entry's field, ignoring case"
            ),
        )
        for n in TEXT
    ]
    out += [OpenApiParameter(n, int) for n in NUMBERS]
    out += [
        OpenApiParameter("limit", int, description=f"a page of at most this many entries (1 to {MAX_LIMIT})"),
        OpenApiParameter("offset", int, description="the page's first entry (0: the first); needs limit"),
    ]  # fmt: skip
    return out


class Results(APIView):
    """The board: readable by users, and by everyone where MLBENCH_PUBLIC_READ allows."""

    @extend_schema(
        operation_id="results_board",
        summary="The results board: results by task, division, measure, data and grader, ranked",
        parameters=_parameters(),
        responses={200: OpenApiResponse(BOARD_SCHEMA), **error_responses(400, 401, 403)},
    )
    def get(self, request: Request) -> HttpResponse:
        # The board writes its JSON itself, from the kept entries' text (results/board.py):
        # the bytes DRF's JSONRenderer would write for it, without decoding them first.
        query = request.query_params
        text = board.answer(parse(query), page_of(query))
        return HttpResponse(text.encode(), content_type="application/json")


ALGORITHMS_SCHEMA = {
    "type": "object",
    "description": (
        "rule (which study's score an algorithm gets, in words), count (entries), sections: "
        "one per suite version and network condition (suite_version, condition, label, "
        "studies: the ids of the studies its ranked entries come from), each with its "
        "entries ranked highest score first. An entry is one algorithm (its study label, "
        "name, options, source) with its score in that condition from the latest ended "
        "study that scored it, the study's overall score, per workload its time after the "
        "held-out gate and its ratio to the best (null: a miss), held_out (applied, passed "
        "per workload), study (id, name, created_at, page, api, algorithms, compared_with, "
        "workloads, conditions, seeds, num_workers, num_cpus, cluster), earlier_studies "
        "(the older studies that scored it, superseded), origin (kind local or imported, "
        "fingerprint, trust), rank (null where not ranked) and unranked (why, or empty)."
    ),
}


class AlgorithmResults(APIView):
    """The algorithms' ranking by study score: readable as the board is."""

    @extend_schema(
        operation_id="results_algorithms",
        summary="Algorithms ranked by their study scores, per suite version and condition",
        responses={200: OpenApiResponse(ALGORITHMS_SCHEMA), **error_responses(401, 403)},
    )
    def get(self, request: Request) -> Response:
        return Response(algorithm_board.board())
