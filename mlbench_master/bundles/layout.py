"""The bundle's format, in one place for the writer and the reader.

A bundle is a zip. ``mlbench-bundle.json`` is the manifest (format and version, the origin
installation's public key, who exported it and when, the runs, and every other member with
its SHA-256 and size); ``mlbench-bundle.sig`` the origin's Ed25519 signature of the
manifest's bytes, base64. The members:

``series.json``                       the series, when a series was exported
``studies/<id>/study.json``           the study, when a study was exported
                                      (study_member.py): its fields and its cells
``series/<id>/series.json``           each series of the exported study's cells
``runs/<id>/run.json``                the run's settings, state, summary and manifest
``runs/<id>/system.json``             the system it ran on (system.py)
``runs/<id>/metrics.jsonl``           every metric point of the run, one JSON object a line
``runs/<id>/logs.jsonl``              its output, one log chunk a line
``runs/<id>/mllog.txt``               its MLPerf Training result log (training runs)
``runs/<id>/algorithm.py``            the uploaded algorithm it trained with, if any
                                      (algorithm_member.py)
``runs/<id>/predictions/<file>.npz``  the predictions files the evaluator graded
``runs/<id>/model/<file>``            its model and the model's audit, where stored
``carried/<sha256>.zip``              a bundle another installation signed, carried whole
                                      so that its runs keep their origin's signature

Member paths are checked before anything is read: plain names joined by ``/``, none
empty, ``.`` or ``..``, nothing absolute, no backslash; each member's place is one of the
above, so a path can never name a file outside its run's folder here.
"""

from __future__ import annotations

import re

FORMAT = "mlbench-result-bundle"
VERSION = 1
MANIFEST = "mlbench-bundle.json"
SIGNATURE = "mlbench-bundle.sig"
SERIES = "series.json"
STUDY = "study.json"  # studies/<id>/study.json; its cells' series at series/<id>/series.json
RUN_FILES = ("run.json", "system.json", "metrics.jsonl", "logs.jsonl")  # every run has them
RUN_OPTIONAL = ("mllog.txt", "algorithm.py")
MODEL_FILES = ("model.onnx", "audit.json")  # MLBENCH_HOME/models/<run>/ (issue 31)
PREDICTIONS = re.compile(r"predictions-step[0-9]{10}\.npz")
MAX_PATH = 200
MAX_MANIFEST_BYTES = 16 * 1024 * 1024
# A member may unpack to at most this many times its packed size (plus a little): deflate
# reaches about 1,000 on a run of zeros; our JSON lines and logs stay well under 100.
MAX_RATIO = 200
RATIO_SLACK = 1024 * 1024

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_RUN = re.compile(r"runs/([0-9]{1,18})/(.+)")
_CARRIED = re.compile(r"carried/([0-9a-f]{64})\.zip")
_STUDY = re.compile(r"studies/([0-9]{1,18})/study\.json")
_STUDY_SERIES = re.compile(r"series/([0-9]{1,18})/series\.json")


class BadPath(ValueError):
    """A member path that is unsafe or has no place in the format (the message says why)."""


def check_path(path: str) -> None:
    """BadPath unless `path` is a plain relative path that stays inside the bundle."""
    if not path or len(path) > MAX_PATH:
        raise BadPath(f"member path {path[:80]!r} is empty or longer than {MAX_PATH} characters")
    if path.startswith("/") or "\\" in path or re.match(r"[A-Za-z]:", path):
        raise BadPath(f"member path {path[:80]!r} is absolute: members stay inside the bundle")
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise BadPath(f"member path {path[:80]!r} climbs out of its folder (. or .. or //)")
    for part in parts:
        if not _NAME.fullmatch(part):
            raise BadPath(
                f"member path {path[:80]!r}: {part[:40]!r} is not a plain file name "
                "(letters, digits, . _ -)"
            )


def place(path: str) -> tuple[str, int | str | None, str]:
    """What member `path` is: ("series", None, ""), ("run", run id, file), ("carried",
    sha256, ""), ("study", study id, ""), ("study_series", series id, ""); BadPath for a
    path the format has no place for."""
    check_path(path)
    if path == SERIES:
        return "series", None, ""
    if found := _STUDY.fullmatch(path):
        return "study", int(found.group(1)), ""
    if found := _STUDY_SERIES.fullmatch(path):
        return "study_series", int(found.group(1)), ""
    if found := _CARRIED.fullmatch(path):
        return "carried", found.group(1), ""
    if found := _RUN.fullmatch(path):
        run, rest = int(found.group(1)), found.group(2)
        if rest in RUN_FILES or rest in RUN_OPTIONAL:
            return "run", run, rest
        folder, _, name = rest.partition("/")
        if folder == "predictions" and PREDICTIONS.fullmatch(name):
            return "run", run, rest
        if folder == "model" and name in MODEL_FILES:
            return "run", run, rest
    raise BadPath(f"member {path!r} has no place in a bundle of format {VERSION}")


def run_folder(run_id: int) -> str:
    return f"runs/{int(run_id)}/"


def carried_path(digest: str) -> str:
    return f"carried/{digest}.zip"


def study_path(study_id: int) -> str:
    return f"studies/{int(study_id)}/{STUDY}"


def study_series_path(series_id: int) -> str:
    return f"series/{int(series_id)}/{SERIES}"
