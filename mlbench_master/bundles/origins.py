"""Where a run or a series comes from, as the API, the pages and the results board show
it: null for this installation's own, else the origin installation, whether this
installation trusts its key (trust.py: read from the table now, never stored with the
run), the run's id there, the bundle, who imported it and when, and this master's
re-grade. One reading for every reader, and the one query a list of runs needs
(`imported`, `with_origins`: the trust comes in the same query)."""

from __future__ import annotations

from typing import Any

from django.db.models import OuterRef, QuerySet, Subquery

from mlbench_master.api.models import Run, RunOrigin, Series, TrustedKey
from mlbench_master.bundles import signing, trust
from mlbench_master.common.dates import iso

ORIGIN_HELP = (
    "null for a run of this installation; for an imported run (read-only): the installation "
    "it ran on (public_key, fingerprint), trust: whether this installation trusts that key "
    "(status trusted or unverified, name, label: 'trusted (NAME)' or 'unverified origin'; an "
    "unverified origin's results are never ranked), its id there (origin_run, "
    "origin_series), the bundle (digest), when and by whom it was exported and imported, and "
    "regrade: this master's evaluator on its predictions (status, and per step both grades "
    "and whether they agree; disagreements)"
)
# The name an operator trusts a run's origin key under, read with the run (`with_origins`).
TRUSTED_AS = "origin_trusted_as"


def imported(runs: QuerySet[Run] | None = None) -> QuerySet[Run]:
    """The imported runs (of `runs`), with their origins read in the same query."""
    found = Run.objects.all() if runs is None else runs
    return _trusted_as(
        found.filter(origin__isnull=False).select_related("origin", "origin__bundle")
    )


def with_origins(runs: QuerySet[Run]) -> QuerySet[Run]:
    """`runs` with each one's origin (or none) and its trust read in the same query."""
    return _trusted_as(
        runs.select_related("origin", "origin__bundle", "origin__bundle__imported_by")
    )


def _trusted_as(runs: QuerySet[Run]) -> QuerySet[Run]:
    names = TrustedKey.objects.filter(public_key=OuterRef("origin__origin_key"))
    return runs.annotate(**{TRUSTED_AS: Subquery(names.values("name")[:1])})


def trust_of(run: Run, origin: RunOrigin) -> trust.Trust:
    """How far this installation trusts `run`'s origin, as the table says now."""
    if origin.origin_key == signing.this_installation().public_key:
        return trust.Trust(trust.TRUSTED, trust.OWN_NAME)
    if hasattr(run, TRUSTED_AS):  # read with the run (`with_origins`)
        name = getattr(run, TRUSTED_AS)
        return (
            trust.Trust(trust.TRUSTED, name) if name is not None else trust.Trust(trust.UNVERIFIED)
        )
    return trust.of_key(origin.origin_key)


def of_run(run: Run) -> dict[str, Any] | None:
    try:
        origin = run.origin
    except RunOrigin.DoesNotExist:
        return None
    bundle = origin.bundle
    return {
        "public_key": origin.origin_key,
        "fingerprint": origin.origin_fingerprint,
        "trust": trust_of(run, origin).as_dict(),
        "origin_run": origin.origin_run,
        "origin_series": origin.origin_series,
        "bundle": bundle.digest,
        "exported_at": iso(bundle.exported_at) if bundle.exported_at else None,
        "exported_by": bundle.exported_by,
        "imported_at": iso(bundle.imported_at),
        "imported_by": bundle.imported_by.get_username() if bundle.imported_by_id else "",
        "received_via": [v.get("fingerprint") for v in bundle.received_via or []],
        "regrade": origin.regrade or {},
    }


def of_series(series: Series) -> dict[str, Any] | None:
    """A series is imported when its runs are: their origin, without the per-run parts."""
    for run in series.runs.all():
        found = of_run(run)
        if found is not None:
            keep = ("public_key", "fingerprint", "trust", "origin_series", "bundle", "imported_at")
            return {k: found[k] for k in keep}
        return None
    return None
