"""Whether an imported result may rank, and on whose grades (docs/publishing.rst, "Whose
results rank"): read for the board from its origin's trust (bundles/trust.py, the table
as it is now) and this master's re-grade of its predictions (bundles/regrade.py).

- A run of this installation: its own grades, as always.
- An imported run whose origin key this installation does not trust: "unverified origin",
  shown but ranked nowhere (the board puts it in a section of its own).
- A trusted origin, and this master's evaluator re-graded the run's predictions:
  - it disagrees with a grade (or refused a file the origin graded): "disputed", shown
    with both numbers, never ranked;
  - it agrees: ranked on THIS master's grades of the evaluations the origin graded, not on
    the origin's numbers (`results_of`: the origin's grade points are replaced by this
    master's, the origin's clock kept: the signature vouches for the timings only).
- A trusted origin this master could not re-grade (it lacks the test set's labels, the
  bundle holds no predictions, the evaluator failed): ranked, on the origin's grades,
  labelled "not re-graded here". Trusting a key is trusting its grades where they cannot
  be checked; an untrusted key's never rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlbench_master.api.models import Run, RunOrigin
from mlbench_master.bundles import origins, regrade, trust
from mlbench_master.results import kept_runs, stored
from mlbench_master.results.run_result import RunResult

LOCAL = "local"
LABELS = {
    LOCAL: "this installation's own result",
    regrade.AGREES: "re-graded here: this master's evaluator agrees; ranked on its grades",
}


@dataclass(frozen=True)
class RunStanding:
    """A run's origin trust and, for an imported run, what its re-grade says."""

    trust: trust.Trust
    judgement: regrade.Judgement | None = None
    fingerprint: str = ""

    @property
    def here_grades(self) -> dict[int, dict[str, float]]:
        """This master's grades by step, where they replace the origin's."""
        j = self.judgement
        return j.here if j is not None and j.status == regrade.AGREES and j.here else {}


def of_runs(runs: list[Run]) -> dict[int, RunStanding]:
    """Each run's standing; `runs` read with `origins.with_origins` (trust in the query)."""
    out = {}
    for run in runs:
        try:
            origin = run.origin
        except RunOrigin.DoesNotExist:
            out[run.pk] = RunStanding(trust.Trust(trust.LOCAL))
            continue
        out[run.pk] = RunStanding(
            origins.trust_of(run, origin), regrade.judged(origin.regrade), origin.origin_fingerprint
        )
    return out


def results_of(runs: list[Run], standings: dict[int, RunStanding]) -> dict[int, RunResult]:
    """Each run's result for the statistics: as kept_runs.results_of reads it, except that
    an imported run this master re-graded and agrees with is read on this master's grades
    (kept_runs.Kept.here, made with stored.on_grades)."""
    kept = kept_runs.of_runs(runs)
    return {r.pk: kept[r.pk].on_board() if standings[r.pk].here_grades else kept[r.pk].result
            for r in runs}  # fmt: skip


def of_entry(runs: list[Run], standings: dict[int, RunStanding]) -> dict[str, Any]:
    """An entry's trust, its re-grade in one status with words and both numbers of each
    disputed evaluation, and why it must not rank (`unranked`, "" where it may; `disputed`
    the same without its trust)."""
    first = standings[runs[0].pk]
    every = [standings[r.pk] for r in runs]
    disputes = [
        {"run": r.pk, **d}
        for r, s in zip(runs, every, strict=True)
        if s.judgement is not None
        for d in s.judgement.disputes
    ]
    unchecked = [
        (r.pk, s.judgement.why)
        for r, s in zip(runs, every, strict=True)
        if s.judgement is not None and s.judgement.status == regrade.UNCHECKED
    ]
    if first.judgement is None:
        status, label = LOCAL, LABELS[LOCAL]
    elif disputes:
        status, label = regrade.DISPUTED, "disputed: " + "; ".join(_dispute(d) for d in disputes)
    elif unchecked:
        whys = "; ".join(f"run {pk}: {why}" for pk, why in unchecked)
        status, label = regrade.UNCHECKED, f"{regrade.UNCHECKED} ({whys})"
    else:
        status, label = regrade.AGREES, LABELS[regrade.AGREES]
    disputed = label if status == regrade.DISPUTED else ""
    return {
        "trust": first.trust.as_dict(),
        "regrade": {"status": status, "label": label, "disputes": disputes},
        "unranked": unverified(first.fingerprint) if not first.trust.trusted else disputed,
        "disputed": disputed,  # why not ranked, trust aside (the board keeps it)
    }


def unverified(fingerprint: str) -> str:
    """Why a result of an origin this installation does not trust is not ranked."""
    return (
        f"unverified origin: signed by installation {fingerprint}, whose key this "
        "installation does not trust (an operator may: mlbench trust add KEY --name NAME)"
    )


def _dispute(d: dict[str, Any]) -> str:
    if d.get("refused"):
        return f"run {d['run']} step {d['step']}: this master's evaluator refused its file ({d['refused']})"
    origin = _number(d.get("origin"))
    here = _number(d.get("here"))
    return f"run {d['run']} step {d['step']}: the origin graded {origin}, this master {here}"


def _number(grades: Any) -> str:
    if not isinstance(grades, dict) or not grades:
        return "nothing"
    first = next((n for n in stored.GRADED_NAMES if n in grades), next(iter(grades)))
    value = grades[first]
    return f"{value:.6g}" if isinstance(value, int | float) else str(value)
