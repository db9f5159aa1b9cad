"""Each run's result kept in the database (`StoredResult`, results/models.py), read by the
series statistics, a study's numbers, the plots and the results board.

Why: a result is made from the run's stored points (every evaluation, its grades, its
timings) and its summary; at ten thousand runs making them again for every request of the
board took most of its time. A result is kept once its run has ended and read back while
it is current: made at the version the database holds now, by this code (`CODE`). The
database raises the version with every change to what a result is made of (results/
models.py), so a new grade, a point a staff user adds, a summary that arrives in the grace
after the end, a re-grade's verdict or an import shows at the next read, never later.

An active run's result changes with every report: it is made at each read, never kept.

What is kept of a run (`Kept`): its result as the statistics read it (`result`), the same
on this master's grades where an imported run's re-grade agrees with its origin
(`here`, standing.py ranks it so), and what the convergence check needs of its grades
(`graded`, `reached`, `epoch`: convergence.py reads no point of a kept run).

This replaces the in-process store of ended runs' results, which held a result until the
process ended (a point stored after the run's grace never showed) and was per process.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import connection

from mlbench_master.api.models import Run, RunOrigin
from mlbench_master.bundles import regrade
from mlbench_master.results import stored
from mlbench_master.results.run_result import RunResult


def _code() -> str:
    """A digest of the source a kept result depends on: a master running other code (an
    upgrade) makes its results again rather than read another version's."""
    root = Path(__file__).resolve().parents[2]
    parts = [
        root / "mlbench_master" / "results",
        root / "mlbench_master" / "bundles",
        root / "mlbench_master" / "grading",
        root / "mlbench_master" / "run_rules",
        root / "mlbench_worker" / "shared",
    ]
    digest = hashlib.sha256()
    for path in sorted(p for part in parts for p in part.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


CODE = _code()


@dataclass(frozen=True)
class Kept:
    """What the readers of results need of one run (the module docstring)."""

    result: RunResult
    here: RunResult | None = None
    graded: bool = False
    reached: bool = False
    epoch: float | None = None

    def on_board(self) -> RunResult:
        """The result the board ranks: on this master's grades where they replace the
        origin's (standing.py)."""
        return self.here or self.result


def available() -> bool:
    """Whether results are kept: PostgreSQL, whose triggers keep the versions (migration
    0022). Elsewhere every read computes."""
    return connection.vendor == "postgresql"


def results_of(runs: Iterable[Run]) -> list[RunResult]:
    """Each run's result for the statistics (as `stored.StoredRun.result` makes it)."""
    runs = list(runs)
    kept = of_runs(runs)
    return [kept[r.pk].result for r in runs]


def of_runs(runs: Sequence[Run]) -> dict[int, Kept]:
    """Each run's `Kept`: read where current, else made (and kept where the run ended).
    Queries: one to read, and where some are not current, one to read those runs again,
    those `compute` makes and one to keep them, however many runs. A run deleted meanwhile
    is made from what the caller read of it."""
    runs = list(runs)
    if not runs:
        return {}
    if not available():
        return compute(runs)
    found, versions = _read([r.pk for r in runs])
    missing = [r.pk for r in runs if r.pk not in found]
    if missing:
        # Read again after the versions: a result kept as of version v is made from rows
        # at least as new (the caller's may be older than the version just read).
        fresh = list(Run.objects.filter(pk__in=missing).select_related("origin").order_by("id"))
        made = compute(fresh)
        lost = set(missing) - made.keys()
        gone = [r for r in runs if r.pk in lost]
        ended = {r.pk for r in fresh if r.state in Run.FINAL_STATES}
        _keep({pk: (versions[pk], k) for pk, k in made.items()
               if pk in ended and versions[pk] is not None})  # fmt: skip
        found.update(made)
        found.update(compute(gone) if gone else {})
    return found


_READ = """
SELECT run_id, version, CASE WHEN made = version AND code = %s THEN body END
FROM api_storedresult WHERE run_id = ANY(%s::bigint[])
"""
# Kept only where the version is still the one read before the result was made: a change
# since (its trigger raised the version) leaves the row not current.
_KEEP = """
UPDATE api_storedresult AS s SET made = u.version, code = %s, body = u.body
FROM unnest(%s::bigint[], %s::bigint[], %s::text[]) AS u(run_id, version, body)
WHERE s.run_id = u.run_id AND s.version = u.version
"""


def _read(ids: list[int]) -> tuple[dict[int, Kept], dict[int, int | None]]:
    """The current kept results of `ids`, and every run's version (None: no row)."""
    found: dict[int, Kept] = {}
    versions: dict[int, int | None] = dict.fromkeys(ids)
    with connection.cursor() as cursor:
        cursor.execute(_READ, [CODE, ids])
        for run_id, version, body in cursor.fetchall():
            versions[run_id] = version
            if body:
                found[run_id] = decode(body)
    return found, versions


def _keep(made: dict[int, tuple[int | None, Kept]]) -> None:
    rows = [(pk, v, encode(k)) for pk, (v, k) in sorted(made.items())]
    rows = [(pk, v, body) for pk, v, body in rows if body is not None]
    if not rows:
        return
    ids, versions, bodies = (list(c) for c in zip(*rows, strict=True))
    with connection.cursor() as cursor:
        cursor.execute(_KEEP, [CODE, ids, versions, bodies])


def compute(runs: Sequence[Run]) -> dict[int, Kept]:
    """Each run's `Kept`, made from its stored points, summary and re-grade: the points of
    all of them in the queries of `stored.load`, their re-grades in one more."""
    verdicts = dict(
        RunOrigin.objects.filter(run_id__in=[r.pk for r in runs]).values_list("run_id", "regrade")
    )
    out = {}
    for found in stored.load(runs):
        reached = found.reaching_evaluation()
        graded = found.evaluated
        result = found.result()
        here = None
        pk = found.run.pk
        if pk in verdicts:
            judgement = regrade.judged(verdicts[pk])
            if judgement.status == regrade.AGREES and judgement.here:
                found.points[found.graded] = stored.on_grades(found, judgement.here)
                here = found.result()
        out[pk] = Kept(
            result,
            here,
            graded,
            reached is not None,
            None if reached is None or reached.epoch is None else float(reached.epoch),
        )
    return out


def encode(kept: Kept) -> str | None:
    """The JSON text of `kept`; None where it holds what JSON cannot (a NaN): not kept."""
    body = {
        "result": dataclasses.asdict(kept.result),
        "here": dataclasses.asdict(kept.here) if kept.here is not None else None,
        "graded": kept.graded,
        "reached": kept.reached,
        "epoch": kept.epoch,
    }
    try:
        return json.dumps(body, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return None


def decode(text: str) -> Kept:
    body = json.loads(text)
    here = body["here"]
    return Kept(
        _result(body["result"]),
        _result(here) if here is not None else None,
        body["graded"],
        body["reached"],
        body["epoch"],
    )


def _result(fields: dict[str, Any]) -> RunResult:
    curve = tuple((float(t), float(a)) for t, a in fields.pop("curve"))
    return RunResult(**fields, curve=curve)
