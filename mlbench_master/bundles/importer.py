# Over 400 lines: one import's steps in their order (rows, series, a study, runs, points, logs,
# files), all inside one transaction that a refusal anywhere rolls back whole.
"""Import: a verified bundle's runs stored here as imported, read-only, once.

Nothing is written before reader.py has verified the whole file. Then one transaction
stores, for each run this master does not hold yet (by its origin's key and id: the same
run arriving again, in the same bundle or another, is stored once), the run in the state it
ended in (lifecycle.store_imported), its origin (RunOrigin: installation, bundle, id there), its
metric points (metrics_store.store), its log chunks, and, beside the database, its
predictions and model files and the file its origin signed (kept to export it again). A
refusal or a failure on the way leaves nothing: the transaction rolls back and the files
written for it are removed. Statistics need no step of their own: this master computes them
from the stored points with its own code whenever they are asked for. The predictions are
then graded again by this master's evaluator where it has the test set (regrade.py). A
study bundle's series records and study are stored in the same transaction, the study last,
through study_member.py (which keeps it once, and never takes a score from the bundle).

A valid signature proves who signed, not that the signer is anyone this installation
knows: a bundle signed by a key it does not trust is stored all the same (it can be read,
downloaded and checked) as an "unverified origin"'s, and ranks nowhere until an operator
trusts the key (trust.py; the answer says each run's trust). Nothing is marked on the runs:
trust is read from the table whenever a result is shown.
"""

from __future__ import annotations

import io
import json
import logging
import math
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.core.exceptions import FieldDoesNotExist, ValidationError
from django.db import IntegrityError, transaction

from mlbench_master.api.models import ImportedBundle, Run, RunOrigin, Series
from mlbench_master.bundles import layout, places, reader, regrade, signing, trust, writer
from mlbench_master.bundles import study_member as study_member
from mlbench_master.bundles.algorithm_member import stored as store_algorithm
from mlbench_master.bundles.launch import carried as carried_launch
from mlbench_master.bundles.refusals import AlreadyHere, BundleRefused
from mlbench_master.common.dates import parse_iso_datetime
from mlbench_master.grading import model_files, prediction_files
from mlbench_master.runs import lifecycle, logs, metrics_store
from mlbench_master.runs import series as series_store

log = logging.getLogger(__name__)
BATCH = 5000
# Columns of run.json this master sets itself: the origin's ids mean nothing here (a resumed
# run's parent is named in its manifest), and the state goes through runs.py.
NOT_COPIED = {*writer.LOCAL_ONLY, "resumed_from", "state"}


@dataclass
class Imported:
    """What an import did: the bundle row (the file's own, or the first carried one's) and
    every run it holds, stored now (`new`) or already here."""

    bundle: ImportedBundle
    runs: list[dict[str, Any]] = field(default_factory=list)
    series: list[int] = field(default_factory=list)
    file: dict[str, Any] = field(default_factory=dict)  # the file imported: digest, signer
    studies: list[dict[str, Any]] = field(default_factory=list)  # study_member.store's

    @property
    def stored(self) -> int:
        return sum(1 for r in self.runs if r["new"])

    @property
    def new(self) -> bool:
        """Whether this import stored anything: a run, or a study whose runs were here."""
        return bool(self.stored or any(s["new"] for s in self.studies))


def import_file(path: Path, user: Any) -> Imported:
    """Verify the bundle at `path` and store its runs; BundleRefused when it is refused."""
    me = signing.this_installation()
    with reader.opened(path) as verified:
        levels = [(verified, verified.runs, verified.series, [])]
        via = [_via(verified)]
        levels += [(c.bundle, c.runs, c.series, via) for c in verified.carried]
        # A bundle that only carries others' runs is no origin of any: it is not stored.
        levels = [level for level in levels if level[1]]
        if not levels:
            raise BundleRefused("the bundle holds no runs")
        for bundle, _, _, _ in levels:
            if _key(bundle) == me.public_key:
                raise AlreadyHere(
                    f"the bundle holds runs of this installation ({me.fingerprint}): they are "
                    "here already, as its own"
                )
        try:
            done = _store(levels, user)
        except IntegrityError:  # the same runs were imported meanwhile: say what is here now
            try:
                done = _store(levels, user)
            except IntegrityError as exc:
                raise BundleRefused(
                    f"the bundle's rows conflict with each other or with what is stored: {exc}"
                ) from None
        # `bundle` is the origin's file, carried inside when the runs were exported again.
        signer = {"public_key": _key(verified), "fingerprint": verified.origin.fingerprint}
        done.file = {"digest": verified.digest, "origin": signer}
        return done


def _key(bundle: reader.Verified) -> str:
    """The origin's public key as this project writes it (base64 of its raw bytes), whatever
    spelling of the same bytes the manifest used: rows, trust and the own-runs check compare
    it as text. Its fingerprint is reader.py's, computed from the key, never the manifest's."""
    return signing.public_key_of(bundle.origin.public_key)


def _via(verified: reader.Verified) -> dict[str, Any]:
    exporter = verified.manifest.get("exporter") or {}
    return {
        **verified.origin.as_dict(),
        "exported_at": verified.manifest.get("exported_at"),
        "exported_by": str(exporter.get("user", ""))[:200],
        "digest": verified.digest,
    }


class _Files:
    """Files written for an import, removed again when it fails."""

    def __init__(self) -> None:
        self.made: list[Path] = []

    def folder(self, path: Path) -> Path:
        if not path.exists():
            path.mkdir(parents=True)
            self.made.append(path)
        return path

    def copy(self, src: io.IOBase | Any, dst: Path) -> None:
        self.made.append(dst)
        with open(dst, "wb") as out:
            shutil.copyfileobj(src, out, reader.CHUNK)

    def remove(self) -> None:
        for path in reversed(self.made):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def _store(levels: list, user: Any) -> Imported:
    files = _Files()
    outcome: Imported | None = None
    try:
        with transaction.atomic():
            for bundle, run_ids, series_id, via in levels:
                row = _bundle_row(bundle, via, user, files)
                outcome = outcome or Imported(row)
                # The file's own study (a carried bundle's travels only as the runs named).
                own = bundle.study is not None and not via
                study = study_member.read(bundle) if own else None
                made = _level(bundle, row, run_ids, series_id, files, outcome, study)
                if study is not None:
                    outcome.studies.append(study_member.store(bundle, study, made, user))
    except BaseException:
        files.remove()
        raise
    assert outcome is not None
    for item in outcome.runs:
        if item["new"]:
            regrade.record(item["id"])
    return outcome


def _bundle_row(bundle: reader.Verified, via: list, user: Any, files: _Files) -> ImportedBundle:
    exporter = bundle.manifest.get("exporter") or {}
    row, _ = ImportedBundle.objects.get_or_create(
        digest=bundle.digest,
        defaults={
            "format_version": layout.VERSION,
            "origin_key": _key(bundle),
            "origin_fingerprint": bundle.origin.fingerprint,
            "exported_at": parse_iso_datetime(str(bundle.manifest.get("exported_at") or "")),
            "exported_by": str(exporter.get("user", ""))[:200],
            "imported_by": lifecycle.creator(user),
            "received_via": via,
            "manifest": bundle.manifest,
        },
    )
    kept = places.bundle_file(bundle.digest)
    if not kept.is_file():
        files.folder(kept.parent)
        with open(bundle.path, "rb") as src:
            files.copy(src, kept)
    return row


def _level(
    bundle: reader.Verified,
    row: ImportedBundle,
    run_ids: list[int],
    series_id: int | None,
    files: _Files,
    outcome: Imported,
    study: dict[str, Any] | None,
) -> dict[int, Series]:
    """Store the level's series and runs; its series here by their ids at the origin: the
    bundle's one series, or a study bundle's (`study`) series records."""
    key = _key(bundle)
    here = dict(
        RunOrigin.objects.filter(origin_key=key, origin_run__in=run_ids).values_list(
            "origin_run", "run_id"
        )
    )
    wanted = [(series_id, layout.SERIES)] if series_id is not None else []
    if study is not None:
        wanted += [(s, layout.study_series_path(s)) for s in study_member.series_ids(bundle)]
    made: dict[int, Series] = {}
    for origin_series, member in wanted:
        series = made[origin_series] = _series(bundle, origin_series, member)
        if series.pk not in outcome.series:
            outcome.series.append(series.pk)
        if here:  # runs of the series imported before it, on their own
            earlier = RunOrigin.objects.filter(
                origin_key=key, origin_run__in=list(here), origin_series=origin_series
            ).values_list("run_id", flat=True)
            lifecycle.join_imported_series(series, list(earlier))
    trusted = trust.of_key(key).label
    for origin_run in run_ids:
        if origin_run in here:
            outcome.runs.append(_said(here[origin_run], origin_run, bundle, False, trusted))
            continue
        run = _run(bundle, row, origin_run, made.get(series_id), made, files)
        outcome.runs.append(_said(run.pk, origin_run, bundle, True, trusted))
    return made


def _said(
    run_id: int, origin_run: int, bundle: reader.Verified, new: bool, trusted: str
) -> dict[str, Any]:
    """A run of the answer; `trust`: "trusted (NAME)", or "unverified origin" where this
    installation does not trust the key that signed it (its result then ranks nowhere)."""
    return {
        "id": run_id,
        "origin_run": origin_run,
        "origin": bundle.origin.fingerprint,
        "new": new,
        "trust": trusted,
    }


def _earlier_series(bundle: reader.Verified, series_id: int) -> Series | None:
    """The series an earlier import made here of the origin's series `series_id`, if any."""
    earlier = (
        RunOrigin.objects.filter(origin_key=_key(bundle), origin_series=series_id)
        .exclude(run__series=None)
        .select_related("run__series")
        .first()
    )
    return earlier.run.series if earlier is not None else None


def _series(bundle: reader.Verified, series_id: int, name: str) -> Series:
    """The series of these runs here: the one an earlier import made, else a new one from
    its record, the member `name`."""
    if (earlier := _earlier_series(bundle, series_id)) is not None:
        return earlier
    record = _json_member(bundle, name)
    if not isinstance(record, dict):
        raise BundleRefused(f"member {name!r} is not a JSON object")
    try:
        created = parse_iso_datetime(str(record.get("created_at") or ""))
        cancelled = record.get("cancelled_at")
        return series_store.store_imported(
            record, created, parse_iso_datetime(str(cancelled)) if cancelled else None
        )
    except (KeyError, TypeError, ValueError, ValidationError) as exc:
        raise BundleRefused(f"member {name!r}: {_why(exc)}") from None


def _run(
    bundle: reader.Verified,
    row: ImportedBundle,
    origin_run: int,
    series: Series | None,
    made: dict[int, Series],
    files: _Files,
) -> Run:
    folder = layout.run_folder(origin_run)
    member = folder + "run.json"
    record = _json_member(bundle, member)
    fields, state = _fields(record, member)
    store_algorithm(bundle, origin_run, fields)  # the uploaded code, checked
    origin_series = record.get("series")
    if series is None and isinstance(origin_series, int):  # a study's, or came before it
        series = made.get(origin_series) or _earlier_series(bundle, origin_series)
    try:
        run = lifecycle.store_imported(fields, state, series, carried_launch(record, member))
    except (ValidationError, ValueError) as exc:
        raise BundleRefused(f"member {member!r}: {_why(exc)}") from None
    RunOrigin.objects.create(
        run=run,
        bundle=row,
        origin_key=_key(bundle),
        origin_fingerprint=bundle.origin.fingerprint,
        origin_run=origin_run,
        origin_series=origin_series if isinstance(origin_series, int) else None,
        regrade={"status": regrade.PENDING},
    )
    _points(bundle, folder + "metrics.jsonl", run)
    if "test_examples" not in record["fields"]:  # a bundle older than the field
        lifecycle.recover_imported_test_set(run)
    _logs(bundle, folder + "logs.jsonl", run)
    for path in bundle.run_members(origin_run):
        rest = path[len(folder) :]
        if rest.startswith("predictions/"):
            target = files.folder(prediction_files.folder(run.pk)) / rest.split("/", 1)[1]
        elif rest.startswith("model/"):
            target = files.folder(model_files.folder(run.pk)) / rest.split("/", 1)[1]
        else:
            continue
        with bundle.open(path) as src:
            files.copy(src, target)
    return run


def _fields(record: Any, member: str) -> tuple[dict[str, Any], str]:
    given = record.get("fields") if isinstance(record, dict) else None
    if not isinstance(given, dict) or not isinstance(given.get("state"), str):
        raise BundleRefused(f"member {member!r} holds no run fields with a state")
    fields: dict[str, Any] = {}
    for name, value in given.items():
        if name in NOT_COPIED:
            continue
        try:
            model_field = Run._meta.get_field(name)
        except FieldDoesNotExist:
            continue  # a column of a newer mlbench: its value stays in the bundle
        try:
            fields[name] = model_field.to_python(value) if value is not None else None
        except ValidationError as exc:
            raise BundleRefused(f"member {member!r}: {name}: {_why(exc)}") from None
    return fields, given["state"]


def _json_member(bundle: reader.Verified, path: str) -> Any:
    try:
        return json.loads(bundle.read(path), parse_constant=_no_constant, parse_float=_finite_float)
    except (ValueError, RecursionError) as exc:
        raise BundleRefused(f"member {path!r} is not JSON: {exc}") from None


def _no_constant(word: str) -> None:
    """NaN and Infinity are not JSON (Python's reader takes them): refused, as the API does."""
    raise ValueError(f"{word} is not a JSON number")


def _finite_float(text: str) -> float:
    """A JSON number as a float; one beyond float64 (1e400), which Python's reader would
    make infinite and the metric store would write as null, is refused."""
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text[:40]} is beyond a float64")
    return value


def _lines(bundle: reader.Verified, path: str) -> Iterator[tuple[int, dict[str, Any]]]:
    with bundle.open(path) as raw:
        for number, data in enumerate(raw, 1):  # lines of bytes: each decoded on its own
            try:
                line = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise BundleRefused(f"member {path!r}, line {number}: not UTF-8 ({exc})") from None
            if not line.strip():
                continue
            try:
                item = json.loads(line, parse_constant=_no_constant, parse_float=_finite_float)
            except (ValueError, RecursionError) as exc:
                raise BundleRefused(f"member {path!r}, line {number}: not JSON: {exc}") from None
            if not isinstance(item, dict):
                raise BundleRefused(f"member {path!r}, line {number}: not a JSON object")
            yield number, item


def _points(bundle: reader.Verified, path: str, run: Run) -> None:
    batch: list[metrics_store.Point] = []
    for number, item in _lines(bundle, path):
        name, value, date = item.get("name"), item.get("value"), item.get("date")
        when = parse_iso_datetime(date) if isinstance(date, str) else None
        if not isinstance(name, str) or not name or len(name) > 200:
            raise BundleRefused(f"member {path!r}, line {number}: the point has no name")
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise BundleRefused(f"member {path!r}, line {number}: value {value!r:.40} is no number")
        if when is None:
            raise BundleRefused(f"member {path!r}, line {number}: date {date!r:.40} is no date")
        meta = item.get("metadata")
        batch.append(
            metrics_store.Point(
                run.pk, None, name, float(value), when, bool(item.get("cumulative")), meta, None
            )
        )
        if len(batch) >= BATCH:
            metrics_store.store(batch)
            batch = []
    metrics_store.store(batch)


def _logs(bundle: reader.Verified, path: str, run: Run) -> None:
    logs.store_imported(run.pk, _log_chunks(bundle, path))


def _log_chunks(bundle: reader.Verified, path: str) -> Iterator[logs.Chunk]:
    """The bundle's log chunks, each checked as it is read (a bad line refuses the bundle
    while runs/logs.py stores them, inside the import's transaction)."""
    for number, item in _lines(bundle, path):
        rank, stream, seq, text = (item.get(k) for k in ("rank", "stream", "seq", "text"))
        when = parse_iso_datetime(str(item.get("created_at") or ""))
        if (
            (rank is not None and not isinstance(rank, int))
            or stream not in logs.STREAMS
            or not isinstance(seq, int)
            or not isinstance(text, str)
            or when is None
        ):
            raise BundleRefused(f"member {path!r}, line {number}: not a log chunk")
        yield logs.Chunk(rank, stream, seq, text, when)


def _why(exc: BaseException) -> str:
    if isinstance(exc, ValidationError):
        if hasattr(exc, "error_dict"):
            return "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
        return " ".join(exc.messages)
    return str(exc)
