"""The board's "Algorithms" part (GET /api/results/algorithms/, docs/studies.rst "Reading a
study"): algorithms ranked by their study scores, per suite version and network condition.

Which studies count: every study that has ended (no run queued or active, not cancelled)
and has a score (every run has its outcome from the evaluator's grades), of this
installation, or imported from an installation whose key this one trusts (bundles/trust.py,
read now; an imported study's runs are read as the results board reads imported runs,
results/standing.py: an unverified origin or a disputed re-grade is shown, never ranked).
A study with a run still pending, or a cancelled one, is not on the board at all.

Which score an algorithm gets, the rule: per suite version and condition, an algorithm
(its study label: the name with its completed options and an uploaded file's short hash)
has the score of the LATEST ranked study that scored it in that condition, never the best
(latest by when the study was made: an imported study keeps its origin's date).
Why the latest and not the best: a best-of would reward running a study again until a
noisy score comes out high; the latest is the algorithm's current measurement, and a
reader can check it because every entry links its study (`study`: id, page, API) and
names the earlier studies it supersedes (`earlier_studies`).

What a score is relative to: AlgoPerf's score of an algorithm is its performance profile
against the other algorithms of the same study, on that study's workloads (results/
study_score.py). Two entries from different studies were therefore scored against
different fields; each entry says what it was compared with (`study.algorithms`,
`study.workloads`) and a section lists the studies its entries come from (`studies`), so
the page can say when a ranking joins more than one study. A suite version is never mixed
with another: its workloads, targets and budgets differ (study_suite.SUITE_VERSION).

Ranking: highest score first; equal scores share a rank (1, 1, 3), listed by label.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.db.models import QuerySet

from mlbench_master.api.models import Run, Study
from mlbench_master.bundles import origins, signing, trust
from mlbench_master.results import standing
from mlbench_master.runs.series import status
from mlbench_master.studies.outcomes import numbers_of
from mlbench_worker.shared import study_suite

RULE = (
    "per suite version and network condition, each algorithm has the score of the latest "
    "ended study that scored it (never the best of several), highest first; equal scores "
    "share a rank. A score is relative to the algorithms and workloads of its own study."
)


def board() -> dict[str, Any]:
    """The algorithms' ranking as GET /api/results/algorithms/ answers it."""
    names = trust.known()
    sections: dict[tuple[str, str], dict[str, dict[str, Any]]] = defaultdict(dict)
    unranked: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for study, numbers, runs in _scored(Study.objects.prefetch_related("cells")):
        origin = _origin(study, runs, names)
        score = numbers["score"]
        for condition, scores in score["by_condition"].items():
            key = (study.suite_version, condition)
            for label, value in scores.items():
                entry = _entry(study, score, condition, label, value, origin)
                if origin["unranked"]:
                    unranked[key].append(entry)
                elif label in sections[key]:  # a later study scored it already
                    sections[key][label]["earlier_studies"].append(_study_link(study))
                else:
                    sections[key][label] = entry
    keys = sorted({*sections, *unranked}, key=_order)
    shown = [_section(key, list(sections[key].values()), unranked[key]) for key in keys]
    return {
        "rule": RULE,
        "count": sum(len(s["entries"]) for s in shown),
        "sections": shown,
    }


def _scored(studies: QuerySet[Study]) -> list[tuple[Study, dict[str, Any], list[Run]]]:
    """The studies that have ended with a score, newest first, each with its numbers and
    runs. Every study's runs are read in one query and the ended ones' numbers together
    (outcomes.numbers_of), so the board's queries do not grow with its studies."""
    studies = list(studies.order_by("-created_at", "-id"))
    series_of = {
        s.pk: {c.series_id for c in s.cells.all() if c.series_id is not None} for s in studies
    }
    every = set().union(*series_of.values())
    runs = list(origins.with_origins(Run.objects.filter(series_id__in=every).order_by("id")))
    by_series: dict[int, list[Run]] = defaultdict(list)
    for run in runs:
        by_series[run.series_id].append(run)
    ended = []
    for study in studies:
        # In id order, as one query for the study's runs answers (a reused series is shared).
        mine = sorted((r for i in series_of[study.pk] for r in by_series[i]), key=lambda r: r.pk)
        if mine and status(study, [r.state for r in mine]) == "ended":
            ended.append((study, mine))
    numbers = numbers_of([s for s, _ in ended], runs)
    return [(s, numbers[s.pk], mine) for s, mine in ended if numbers[s.pk]["score"] is not None]


def _origin(study: Study, runs: list[Run], names: dict[str, str]) -> dict[str, Any]:
    """Where the study comes from, whether this installation trusts it, and why it may
    not rank ("" where it may)."""
    imported = [r for r in runs if getattr(r, "origin", None) is not None]
    said = study.origin or {}
    if not said and not imported:
        me = signing.this_installation().fingerprint
        return {"kind": "local", "fingerprint": me, "trust": trust.Trust(trust.LOCAL).as_dict(),
                "unranked": ""}  # fmt: skip
    fingerprint = str(said.get("fingerprint") or said.get("origin_fingerprint") or "")
    unranked = ""
    found = None
    key = said.get("public_key") or said.get("origin_key")
    if key:
        found = trust.of_key(str(key), names)
    elif fingerprint:
        found = _trust_of_fingerprint(fingerprint, names)
    if imported:
        standings = standing.of_runs(imported)
        stand = standing.of_entry(imported, standings)
        found = found or trust.Trust(**_trust_fields(stand["trust"]))
        fingerprint = fingerprint or standings[imported[0].pk].fingerprint
        unranked = stand["unranked"]
    found = found or trust.Trust(trust.UNVERIFIED)
    if not found.trusted:
        unranked = (
            f"unverified origin: signed by installation {fingerprint or 'unknown'}, whose key "
            "this installation does not trust (an operator may: mlbench trust add KEY --name NAME)"
        )
    return {"kind": "imported", "fingerprint": fingerprint, "trust": found.as_dict(),
            "unranked": unranked}  # fmt: skip


def _trust_fields(shown: dict[str, Any]) -> dict[str, str]:
    return {"status": shown["status"], "name": shown.get("name") or ""}


def _trust_of_fingerprint(fingerprint: str, names: dict[str, str]) -> trust.Trust:
    """The trust of a key known only by its fingerprint: a trusted key's, or none."""
    for key, name in names.items():
        try:
            if signing.fingerprint(key) == fingerprint:
                return trust.Trust(trust.TRUSTED, name)
        except ValueError:  # a stored key that is not one: it names nobody
            continue
    return trust.Trust(trust.UNVERIFIED)


def _study_link(study: Study) -> dict[str, Any]:
    return {
        "id": study.pk,
        "name": study.name,
        "created_at": study.created_at.isoformat(),
        "page": f"/studies/{study.pk}/",
        "api": f"/api/studies/{study.pk}/",
    }


def _entry(study: Study, score: dict[str, Any], condition: str, label: str, value: float,
           origin: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    """One algorithm's score in one condition, with the study it comes from."""
    spec = next((a for a in study.algorithms if a.get("label") == label), {})
    labels = [a.get("label") for a in study.algorithms]
    gate = [p for p in score["held_out_passed"] if p["algorithm"] == label]
    return {
        "rank": None,
        "algorithm": label,
        "name": spec.get("algorithm", label),
        "options": spec.get("options") or {},
        "source": spec.get("source") or "",
        "score": value,
        "overall": score["overall"].get(label),
        "workloads": {
            r["workload"]: {"time": r["time"], "ratio": r["ratio"]}
            for r in score["ratios"]
            if r["algorithm"] == label and r["condition"] == condition
        },
        "held_out": {
            "applied": study.variant_seed is not None,
            "passed": {p["workload"]: p["passed"] for p in gate},
        },
        "study": {
            **_study_link(study),
            "algorithms": labels,
            "compared_with": [x for x in labels if x != label],
            **{k: v for k, v in study.setup().items() if k != "algorithms"},
        },
        "earlier_studies": [],
        "origin": {k: v for k, v in origin.items() if k != "unranked"},
        "unranked": origin["unranked"],
    }


def _rank(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Highest score first; equal scores share a rank (1, 1, 3), then by label."""
    entries.sort(key=lambda e: (-e["score"], e["algorithm"]))
    for place, entry in enumerate(entries, start=1):
        before = entries[place - 2] if place > 1 else None
        tied = before is not None and abs(before["score"] - entry["score"]) < 1e-12
        entry["rank"] = before["rank"] if tied else place
    return entries


def _order(key: tuple[str, str]) -> tuple:
    version, condition = key
    known = list(study_suite.CONDITIONS)
    place = known.index(condition) if condition in known else len(known)
    return (_version_key(version), place, condition)


def _version_key(version: str) -> tuple:
    """Newest suite version first (numbers compared as numbers)."""
    return tuple((0, -int(p)) if p.isdigit() else (1, p) for p in version.split("."))


def _section(key: tuple[str, str], ranked: list[dict[str, Any]],
             unranked: list[dict[str, Any]]) -> dict[str, Any]:  # fmt: skip
    version, condition = key
    entries = _rank(ranked) + sorted(unranked, key=lambda e: (e["algorithm"], -e["study"]["id"]))
    studies = sorted({e["study"]["id"] for e in ranked})
    return {
        "suite_version": version,
        "condition": condition,
        "label": f"suite {version}, {condition}",
        "studies": studies,
        "entries": entries,
    }
