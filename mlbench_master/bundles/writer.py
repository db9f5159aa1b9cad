"""Export: runs, a series or a study (study_member.py) as one signed bundle (layout.py), streamed.

Why streamed: a run of millions of points must leave without the master holding it in
memory (the original's downloads timed out). Members are read from the database in chunks
and zipped as they come (api/zipstream.py); each member's SHA-256 and size are counted on
the way, so the manifest, which lists them all, is the last member written, and it is signed
then. Only runs that have ended travel: a running run's record is not final.

A run that came from another installation is not re-serialized: the bundle its origin
signed is carried whole (``carried/<sha256>.zip``, kept since its import), with the ids of
the runs taken from it, so whoever imports the new bundle can check the origin's own
signature and receives the origin's bytes.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import json
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from django.utils import timezone

from mlbench_master.api.models import LogChunk, Metric, Run, RunOrigin, Series
from mlbench_master.bundles import algorithm_member, layout, signing, system
from mlbench_master.bundles.places import bundle_file
from mlbench_master.bundles.refusals import NotExportable
from mlbench_master.common.dates import iso
from mlbench_master.common.zipstream import stream_zip
from mlbench_master.grading import model_files, prediction_files
from mlbench_master.results import convergence, cost, mllog
from mlbench_worker.shared import catalogue

log = logging.getLogger(__name__)
CHUNK = 1024 * 1024
LINES = 2000  # JSON lines joined into one chunk
# Run columns that stay home: the row's id (the bundle names the run by it), secrets and
# bookkeeping of this master, and the links to other rows (written as ids below).
LOCAL_ONLY = {"id", "token_salt", "log_bytes", "job_id", "job_metadata", "created_by", "series"}


@dataclass
class Selection:
    """What a bundle holds: this installation's runs, and the imported ones by the bundle
    their origin signed."""

    local: list[Run]
    series: Series | None = None
    carried: dict[str, list[RunOrigin]] = field(default_factory=dict)
    # A study bundle (study_member.select): the study's record (study.json) and the series
    # of its cells, each with its record.
    study: dict[str, Any] | None = None
    study_series: list[Series] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.local) + sum(len(v) for v in self.carried.values())


def select(runs: Iterable[Run], series: Series | None = None) -> Selection:
    """The selection of `runs` (of `series` when given); NotExportable naming every run that
    has not ended, or whose origin's bundle file is gone."""
    runs = sorted(runs, key=lambda r: r.pk)
    if not runs:
        raise NotExportable(
            f"series {series.pk} has no runs to export" if series else "no runs to export"
        )
    active = [f"run {r.pk} is {r.state}" for r in runs if r.state not in Run.FINAL_STATES]
    if active:
        # Deleting the run would destroy what is being exported: the way on is to wait
        # for the run to end, or for a series to cancel what is left of it.
        fix = (
            f"wait for series {series.pk} to end, or cancel what is left of it "
            f"(mlbench series {series.pk} --cancel), then export it again"
            if series is not None
            else "wait for it to end, then export it again"
        )
        raise NotExportable(
            "only ended runs can be exported (their record is final): "
            + "; ".join(active[:5])
            + f"; {fix}"
        )
    origins = {o.run_id: o for o in RunOrigin.objects.filter(run__in=runs).select_related("bundle")}
    chosen = Selection([r for r in runs if r.pk not in origins])
    for origin in origins.values():
        digest = origin.bundle.digest
        if not bundle_file(digest).is_file():
            raise NotExportable(
                f"run {origin.run_id} was imported, and the bundle its origin signed is no "
                f"longer at {bundle_file(digest)}: it cannot be exported with that signature"
            )
        chosen.carried.setdefault(digest, []).append(origin)
    if series is not None and not chosen.local:
        chosen.series = None  # an imported series travels with its origin's bundle
    else:
        chosen.series = series
    return chosen


def stream(selection: Selection, exporter: str) -> Iterator[bytes]:
    """The bundle's bytes, produced as they are sent."""
    return stream_zip(_entries(selection, exporter))


class _Tally:
    """Counts each member's SHA-256 and size while its chunks pass on to the zip."""

    def __init__(self) -> None:
        self.members: list[dict[str, Any]] = []

    def member(self, path: str, chunks: Iterable[bytes]) -> tuple[str, Iterator[bytes]]:
        layout.place(path)  # the writer keeps to the format the reader checks

        def counted() -> Iterator[bytes]:
            digest, size = hashlib.sha256(), 0
            for chunk in chunks:
                digest.update(chunk)
                size += len(chunk)
                yield chunk
            self.members.append({"path": path, "sha256": digest.hexdigest(), "bytes": size})

        return path, counted()


def _entries(selection: Selection, exporter: str) -> Iterator[tuple[str, Iterator[bytes]]]:
    tally = _Tally()
    notes: list[str] = []
    if selection.series is not None:
        yield tally.member(layout.SERIES, _json(_series_record(selection.series)))
    for series in selection.study_series:
        yield tally.member(layout.study_series_path(series.pk), _json(_series_record(series)))
    if selection.study is not None:
        yield tally.member(layout.study_path(selection.study["id"]), _json(selection.study))
    for run in selection.local:
        yield from (tally.member(p, c) for p, c in _run_members(run, notes))
    carried = []
    for digest, origins in sorted(selection.carried.items()):
        path = layout.carried_path(digest)
        yield tally.member(path, _file(bundle_file(digest)))
        series_ids = {o.origin_series for o in origins}
        whole = selection.series is None and len(series_ids) == 1 and None not in series_ids
        carried.append(
            {
                "bundle": path,
                "runs": sorted(o.origin_run for o in origins),
                "series": series_ids.pop() if whole and _all_of_series(origins) else None,
            }
        )
    me = signing.this_installation()
    manifest = {
        "format": layout.FORMAT,
        "format_version": layout.VERSION,
        "origin": me.as_dict(),
        "exporter": {"user": exporter, "mlbench": _version()},
        "exported_at": iso(timezone.now()),
        "runs": [r.pk for r in selection.local],
        "series": selection.series.pk if selection.series is not None else None,
        "carried": carried,
        "notes": notes,
        "members": sorted(tally.members, key=lambda m: m["path"]),
    }
    if selection.study is not None:
        manifest["study"] = selection.study["id"]
    body = json.dumps(manifest, indent=1, sort_keys=True).encode()
    yield layout.MANIFEST, iter([body])
    yield layout.SIGNATURE, iter([signing.sign(body).encode() + b"\n"])


def _all_of_series(origins: list[RunOrigin]) -> bool:
    """Whether `origins` are every run here of their imported series (then the series
    travels with them)."""
    series_ids = {o.run.series_id for o in origins}
    if len(series_ids) != 1 or None in series_ids:
        return False
    return Run.objects.filter(series_id=series_ids.pop()).count() == len(origins)


def _run_members(run: Run, notes: list[str]) -> Iterator[tuple[str, Iterable[bytes]]]:
    folder = layout.run_folder(run.pk)
    yield folder + "run.json", _json(run_record(run))
    yield folder + "system.json", _json(system.describe(run))
    yield folder + "metrics.jsonl", _metric_lines(run)
    yield folder + "logs.jsonl", _log_lines(run)
    if not catalogue.is_measurement(run.task) and not run.open_division:
        text = _mllog(run, notes)
        if text is not None:
            yield folder + "mllog.txt", iter([text.encode()])
    yield from algorithm_member.written(run)
    for stored in prediction_files.stored(run.pk):
        yield folder + "predictions/" + stored.path.name, _file(stored.path)
    models = model_files.folder(run.pk)
    for name in layout.MODEL_FILES:
        if (models / name).is_file():
            yield folder + "model/" + name, _file(models / name)


def _mllog(run: Run, notes: list[str]) -> str | None:
    try:
        return mllog.run_log(run)
    except Exception as exc:  # noqa: BLE001 - the bundle goes on without it, and says why
        log.warning("run %s: no MLPerf log in its bundle: %s", run.pk, exc)
        notes.append(f"run {run.pk}: no MLPerf log: {exc}")
        return None


def run_record(run: Run) -> dict[str, Any]:
    """run.json: every column of the run that means something elsewhere, as JSON, and the
    nodes its launch recorded (`nodes`; null when it recorded none): the rest of the launch
    record is this master's bookkeeping, but a run's cost is its nodes' prices, so without
    them the run could not be priced where it is imported (results/cost.py)."""
    fields = {}
    for f in Run._meta.concrete_fields:
        if f.name in LOCAL_ONLY:
            continue
        value = getattr(run, f.attname)
        fields[f.name] = iso(value) if isinstance(value, dt.datetime) else value
    return {
        "id": run.pk,
        "series": run.series_id,
        "created_by": run.created_by.get_username() if run.created_by_id else "",
        "fields": fields,
        "nodes": cost.recorded_nodes(run),
    }


def _series_record(series: Series) -> dict[str, Any]:
    """series.json. `convergence`: this installation's check of each worker count's runs
    against the reference series (results/convergence.py, with its statistic), so a reader
    of the bundle sees a flag the origin raised; an importing master checks again itself and
    never takes this one's word (the board shows its own)."""
    memo: dict[Any, Any] = {}
    runs = list(Run.objects.filter(series=series))
    return {
        "id": series.pk,
        "name": series.name,
        "created_at": iso(series.created_at),
        "created_by": series.created_by.get_username() if series.created_by_id else "",
        "seeds": series.seeds,
        "worker_counts": series.worker_counts,
        "settings": series.settings,
        "cancelled_at": iso(series.cancelled_at) if series.cancelled_at else None,
        "convergence": {
            str(n): convergence.of_group([r for r in runs if r.num_workers == n], memo)
            for n in sorted({r.num_workers for r in runs})
        },
    }


def _json(data: Any) -> Iterator[bytes]:
    yield json.dumps(data, indent=1, sort_keys=True, default=str).encode()


def _lines(rows: Iterator[dict[str, Any]]) -> Iterator[bytes]:
    while batch := list(itertools.islice(rows, LINES)):
        yield "".join(json.dumps(r, sort_keys=True) + "\n" for r in batch).encode()


def _metric_lines(run: Run) -> Iterator[bytes]:
    rows = (
        Metric.objects.filter(run_id=run.pk)
        .order_by("name", "date", "id")
        .values_list("name", "value", "date", "cumulative", "metadata")
        .iterator(chunk_size=5000)
    )
    return _lines(
        {"name": n, "value": v, "date": iso(d), "cumulative": c, "metadata": m}
        for n, v, d, c, m in rows
    )


def _log_lines(run: Run) -> Iterator[bytes]:
    rows = (
        LogChunk.objects.filter(run_id=run.pk)
        .order_by("seq")
        .values_list("rank", "stream", "seq", "text", "created_at")
        .iterator(chunk_size=1000)
    )
    return _lines(
        {"rank": r, "stream": s, "seq": q, "text": t, "created_at": iso(c)}
        for r, s, q, t, c in rows
    )


def _file(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            yield chunk


def _version() -> str:
    try:
        return version("mlbench")
    except PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown"
