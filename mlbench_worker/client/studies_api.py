"""ApiClient's calls of /api/studies/ (algorithm studies, docs/api.rst "Algorithm studies"),
kept beside api.py so that module stays the original client's methods: ApiClient derives
from this. Every call returns a Future of the `requests.Response`, as the others do."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any


class StudyCalls:
    """Create, list, get and cancel algorithm studies; `_submit` is ApiClient's."""

    _submit: Callable[..., Future]  # ApiClient's: one request on its session, in its pool

    def create_study(
        self,
        name: str,
        algorithms: Sequence[str | dict[str, Any]],
        workloads: Sequence[str] | None = None,
        conditions: Sequence[str] | None = None,
        seeds: Sequence[int] | None = None,
        num_workers: int | None = None,
        num_cpus: float | None = None,
        held_out: bool | None = None,
        reuse: bool | None = None,
    ) -> Future:
        """Queue a study (POST /api/studies/): `algorithms` are names ("allreduce") or
        objects {"algorithm", "options", "algorithm_source"} (an uploaded file by its
        SHA-256, `upload_algorithm`); `workloads` and `conditions` are the suite's (None:
        all of them), `seeds` each cell's (None: [1]). `held_out` (default true): draw a
        held-out variant per workload after the algorithms are fixed; `reuse` (default
        true): reuse a cell an earlier study ran the same way. The master checks every
        cell before it stores anything and refuses (400, naming the field: `algorithms`,
        `workloads`, `conditions`, `seeds`, `num_workers`, `runs`) what one run would be
        refused for. Answers 201 with the study as `get_study` returns it."""
        body: dict[str, Any] = {
            "name": name,
            "algorithms": list(algorithms),
            "workloads": None if workloads is None else list(workloads),
            "conditions": None if conditions is None else list(conditions),
            "seeds": None if seeds is None else list(seeds),
            "num_workers": num_workers,
            "num_cpus": num_cpus,
            "held_out": held_out,
            "reuse": reuse,
        }
        return self._submit(
            "POST", "studies/", json={k: v for k, v in body.items() if v is not None}
        )

    def list_studies(self) -> Future:
        """Every study, newest first, with its state and run counts (GET /api/studies/)."""
        return self._submit("GET", "studies/")

    def get_study(self, study_id: int | str) -> Future:
        """A study with its cells (runs, medians), `pending_runs` and, once no run is
        pending, its `score` (GET /api/studies/<id>/)."""
        return self._submit("GET", f"studies/{study_id}/")

    def cancel_study(self, study_id: int | str) -> Future:
        """Drop the study's queued runs and cancel its active one; ended runs and their
        grades stay, a cancelled run counts as a miss (409: nothing left to cancel)."""
        return self._submit("POST", f"studies/{study_id}/cancel/")
