"""A study in a signed bundle (docs/publishing.rst, "Studies in bundles"): out and in.

Out (`select`): every run of the study's cells, its own cells' series and the reused
cells' (an earlier study's), each series with its record (series/<id>/series.json), and
studies/<id>/study.json: the study's own fields and its cells (the algorithm's label, the
workload, the condition, whether it is a held-out variant or reused, and its series in the
bundle). Never its score: whoever imports it computes the score from the runs' grades.
Only a study with no run pending leaves (studies/outcomes.py: nothing queued or running,
no finished run still waiting for its grades): its record and its score are final then.
A study imported from elsewhere does not leave again: its runs would travel in the bundle
their origin signed, which has no place for this master's copy of the study; its origin
exports it.

In (`read`, `series_ids`, `store`): once the import has stored the runs and the series,
the study is stored by studies/store.py (`store_imported`, which refuses a suite version
or a grid this master cannot score) with its `origin`: its id there, the signer's key and
fingerprint, the bundle, who exported and imported it. A study already here (the same
signer's key and the same id there) is not stored again: the same bundle imported twice
stores it once, as its runs. Its score is then this master's: studies/outcomes.py reads
the imported runs' grades as stored (results/stored.py) exactly as for a study of its own.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import ValidationError
from django.utils import timezone

from mlbench_master.api.models import Run, Series, Study
from mlbench_master.bundles import layout, reader, signing, trust, writer
from mlbench_master.bundles.refusals import BundleRefused, NotExportable
from mlbench_master.common.dates import iso, parse_iso_datetime
from mlbench_master.studies import outcomes
from mlbench_master.studies import store as study_store

# What an imported study's origin says of its score and its standing (GET /api/studies/<id>/).
SCORED_HERE = (
    "computed by this master from the imported runs' grades as they arrived (the origin's "
    "evaluator's, on its benchmark clock); the origin's score does not travel"
)
STANDING = (
    "whether this installation trusts the key that signed it is not stored here but read from "
    "the trusted keys whenever a result is shown: an imported study's score ranks only where "
    "that key is trusted and no re-grade disputes its runs, as any imported result; each run "
    "shows its origin's trust and this master's re-grade (GET /api/runs/<id>/, origin)"
)


def select(study: Study) -> writer.Selection:
    """The bundle's selection of `study`: NotExportable (409) for a study imported from
    elsewhere, a cell without its series, or runs still pending."""
    if study.origin:
        raise NotExportable(
            f"study {study.pk} was imported from installation "
            f"{study.origin.get('fingerprint', '?')} (its study "
            f"{study.origin.get('origin_study', '?')} there): export it from its origin"
        )
    cells = list(study.cells.order_by("id"))
    if not cells:
        raise NotExportable(f"study {study.pk} has no cells to export")
    if lost := [c for c in cells if c.series_id is None]:
        raise NotExportable(
            f"study {study.pk}: the series of cell {lost[0].algorithm} on {lost[0].workload} "
            f"at {lost[0].condition} was deleted; a study without all its cells cannot be scored "
            "where it is imported"
        )
    numbers = outcomes.study_numbers(study)
    if numbers["pending_runs"]:
        pending = [
            f"run {r['id']} is {r['why']}"
            for cell in numbers["cells"]
            for r in cell["runs"]
            if r["status"] == outcomes.PENDING
        ]
        raise NotExportable(
            f"study {study.pk} has {numbers['pending_runs']} run(s) still pending (its record "
            "and its score are not final): " + "; ".join(pending[:5]) + "; wait for them "
            f"to end and be graded, or cancel what is left of it (mlbench study cancel "
            f"{study.pk}), then export it again"
        )
    series = list(Series.objects.filter(pk__in={c.series_id for c in cells}).order_by("pk"))
    chosen = writer.select(Run.objects.filter(series__in=series))
    if chosen.carried:  # never for a study of this installation: its cells' runs are its own
        raise NotExportable(f"study {study.pk} holds imported runs; export it from their origin")
    chosen.study = record(study, cells)
    chosen.study_series = series
    return chosen


def record(study: Study, cells: list[Any]) -> dict[str, Any]:
    """study.json: the study's own fields and its cells, never its score."""
    return {
        "id": study.pk,
        "name": study.name,
        "created_at": iso(study.created_at),
        "created_by": study.created_by.get_username() if study.created_by_id else "",
        **study.setup(),
        "variant_seed": study.variant_seed,
        "variants": study.variants,
        "cancelled_at": iso(study.cancelled_at) if study.cancelled_at else None,
        "cells": [
            {
                "algorithm": c.algorithm,
                "workload": c.workload,
                "condition": c.condition,
                "variant": c.variant,
                "reused": c.reused,
                "series": c.series_id,
            }
            for c in cells
        ],
    }


def series_ids(bundle: reader.Verified) -> list[int]:
    """The origin's ids of the series whose records a study bundle holds."""
    kinds = (layout.place(p) for p in bundle.members)
    return sorted(owner for kind, owner, _ in kinds if kind == "study_series")


def read(bundle: reader.Verified) -> dict[str, Any]:
    """The study.json of a verified study bundle, as a JSON object naming the manifest's
    study; BundleRefused naming the member otherwise (what it says is checked by `store`)."""
    path = layout.study_path(bundle.study)
    try:
        found = json.loads(bundle.read(path))
    except (ValueError, RecursionError) as exc:
        raise BundleRefused(f"member {path!r} is not JSON: {exc}") from None
    if not isinstance(found, dict):
        raise BundleRefused(f"member {path!r} is not a JSON object")
    if found.get("id") != bundle.study:
        raise BundleRefused(
            f"member {path!r} is of study {found.get('id')!r:.40}; the manifest names study "
            f"{bundle.study}"
        )
    return found


def store(
    bundle: reader.Verified, found: dict[str, Any], series: dict[int, Series], user: Any
) -> dict[str, Any]:
    """Store the study `found` (`read`) of `bundle`, its cells on `series` (the origin's
    series ids -> the series here, stored by the import), unless it is here already; what
    the import's answer says of it. BundleRefused naming the member for a record this
    master cannot store (studies/store.py says why)."""
    key = signing.public_key_of(bundle.origin.public_key)
    origin_study = found["id"]
    said = {"origin_study": origin_study, "origin": bundle.origin.fingerprint,
            "trust": trust.of_key(key).label}  # fmt: skip
    earlier = Study.objects.filter(origin__public_key=key, origin__origin_study=origin_study)
    if (here := earlier.order_by("id").first()) is not None:
        return {"id": here.pk, **said, "new": False}
    exporter = bundle.manifest.get("exporter") or {}
    origin = {
        "origin_study": origin_study,
        "public_key": key,
        "fingerprint": bundle.origin.fingerprint,
        "bundle": bundle.digest,
        "exported_at": bundle.manifest.get("exported_at"),
        "exported_by": str(exporter.get("user", ""))[:200],
        "created_by": str(found.get("created_by") or "")[:150],
        "imported_at": iso(timezone.now()),
        "imported_by": user.get_username() if getattr(user, "is_authenticated", False) else "",
        "score": SCORED_HERE,
        "standing": STANDING,
    }
    path = layout.study_path(origin_study)
    try:
        cancelled = found.get("cancelled_at")
        study = study_store.store_imported(
            found, series, origin, parse_iso_datetime(str(found.get("created_at") or "")),
            parse_iso_datetime(str(cancelled)) if cancelled else None,
        )  # fmt: skip
    except (KeyError, TypeError, ValueError, ValidationError) as exc:
        raise BundleRefused(f"member {path!r}: {_why(exc)}") from None
    return {"id": study.pk, **said, "new": True}


def _why(exc: BaseException) -> str:
    if isinstance(exc, ValidationError):
        if hasattr(exc, "error_dict"):
            return "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
        return " ".join(exc.messages)
    if isinstance(exc, KeyError):
        return f"it has no {exc.args[0]!r}"
    return str(exc)
