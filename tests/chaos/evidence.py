"""What the invariants are checked on, gathered from the real things after the series: the
master's database (runs, points, logs, and every state change as a trigger recorded it),
the audit records of the final models the master was posted (under its home), the points
rank 0 wrote to its own file, the fault log, the poller's answers, and what of the master
is left on the machine.

The state history comes from a trigger this module installs in the master's database for
the series (`install_history`): every insert, every change of state, every new launch
record, every rewrite of a final run's end and every delete, with the database's clock. It records what
was written, whoever wrote it, so a second write of a final state cannot hide.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from mlbench_master.grading import model_files
from tests.chaos.faults import Fault
from tests.chaos.poller import Poll

FINAL = ("FINISHED", "FAILED", "CANCELLED")
HISTORY_TABLE = "chaos_run_history"
_INSTALL = f"""
CREATE TABLE IF NOT EXISTS {HISTORY_TABLE} (
    id bigserial PRIMARY KEY,
    run_id bigint NOT NULL,
    op text NOT NULL,
    old_state text,
    new_state text,
    reason text,
    launch text,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE OR REPLACE FUNCTION chaos_record_run() RETURNS trigger AS $$
DECLARE
    new_launch text;
    old_launch text;
    what text;
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO {HISTORY_TABLE} (run_id, op, old_state) VALUES (OLD.id, 'delete', OLD.state);
        RETURN OLD;
    END IF;
    new_launch := coalesce(NEW.job_metadata #>> '{{local,launch_id}}',
                           NEW.job_metadata #>> '{{slurm,job_id}}');
    IF TG_OP = 'INSERT' THEN
        INSERT INTO {HISTORY_TABLE} (run_id, op, new_state, reason, launch)
        VALUES (NEW.id, 'insert', NEW.state, NEW.reason, new_launch);
        RETURN NEW;
    END IF;
    old_launch := coalesce(OLD.job_metadata #>> '{{local,launch_id}}',
                           OLD.job_metadata #>> '{{slurm,job_id}}');
    IF NEW.state IS DISTINCT FROM OLD.state THEN
        what := 'state';
    ELSIF OLD.state IN ('FINISHED', 'FAILED', 'CANCELLED')
          AND (NEW.finished_at IS DISTINCT FROM OLD.finished_at
               OR NEW.exit_code IS DISTINCT FROM OLD.exit_code) THEN
        what := 'rewrite';
    ELSIF new_launch IS DISTINCT FROM old_launch THEN
        what := 'launch';
    ELSE
        RETURN NEW;
    END IF;
    INSERT INTO {HISTORY_TABLE} (run_id, op, old_state, new_state, reason, launch)
    VALUES (NEW.id, what, OLD.state, NEW.state, NEW.reason, new_launch);
    RETURN NEW;
END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS chaos_run_history ON api_run;
CREATE TRIGGER chaos_run_history AFTER INSERT OR UPDATE OR DELETE ON api_run
    FOR EACH ROW EXECUTE FUNCTION chaos_record_run();
"""
_REMOVE = f"""
DROP TRIGGER IF EXISTS chaos_run_history ON api_run;
DROP FUNCTION IF EXISTS chaos_record_run();
DROP TABLE IF EXISTS {HISTORY_TABLE};
"""


def install_history(database_url: str) -> None:
    """Record every state change of every run from now on (see the module's docstring)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(_INSTALL)


def remove_history(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(_REMOVE)


@dataclass(frozen=True)
class Change:
    """One recorded write of a run. op: insert; state (the state changed); rewrite (a
    final run's end time or exit code written again, the state unchanged); launch (a new
    launch recorded, nothing else); delete."""

    run_id: int
    op: str
    old: str | None
    new: str | None
    reason: str
    launch: str | None
    at: float  # seconds since the epoch


@dataclass(frozen=True)
class Stored:
    """A metric point of a run as the database holds it."""

    run_id: int
    uid: str | None
    name: str
    value: float
    metadata: dict[str, Any]
    date: str = ""  # when it was measured (ISO 8601): a resent point keeps it


@dataclass(frozen=True)
class Submitted:
    """A run the series asked for, the file its rank 0 writes its points to, and the task
    it was created with (which decides how it is graded; "" for a command of no task)."""

    run_id: int
    label: str
    points_file: str | None = None
    task: str = ""


@dataclass
class Evidence:
    submitted: list[Submitted]
    runs: dict[int, dict[str, Any]]  # the runs still stored: state, reason, has_summary
    history: list[Change]
    stored: dict[int, list[Stored]]
    measured: dict[int, dict[str, tuple[str, float]]]  # run -> uid -> (name, value)
    logs: dict[int, str]
    faults: list[Fault] = field(default_factory=list)
    polls: list[Poll] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)
    launch_dirs: dict[int, int] = field(default_factory=dict)  # local driver: folders per run
    unfinished: dict[int, str] = field(default_factory=dict)  # run -> its state at the end
    # run -> the audit record of its final model as the master stored it (model_files.py),
    # for the runs that posted one
    models: dict[int, dict[str, Any]] = field(default_factory=dict)

    def changes(self, run_id: int) -> list[Change]:
        return [c for c in self.history if c.run_id == run_id]


def from_database(database_url: str) -> dict[str, Any]:
    """The runs, their history, points and logs as the master's database holds them."""
    with psycopg.connect(database_url) as conn:
        runs = {
            int(row[0]): {"state": row[1], "reason": row[2] or "", "has_summary": bool(row[3])}
            for row in conn.execute(
                "SELECT id, state, reason, summary::text NOT IN ('{}', 'null') FROM api_run"
            )
        }
        history = [
            Change(int(r[0]), r[1], r[2], r[3], r[4] or "", r[5], r[6].timestamp())
            for r in conn.execute(
                f"SELECT run_id, op, old_state, new_state, reason, launch, at "
                f"FROM {HISTORY_TABLE} ORDER BY id"
            )
        ]
        stored: dict[int, list[Stored]] = {}
        for r in conn.execute(
            "SELECT run_id, uid, name, value, metadata, date FROM api_metric "
            "WHERE run_id IS NOT NULL"
        ):
            point = Stored(int(r[0]), r[1], r[2], r[3], r[4] or {}, r[5].isoformat())
            stored.setdefault(point.run_id, []).append(point)
        logs: dict[int, str] = {}
        for r in conn.execute("SELECT run_id, text FROM api_logchunk ORDER BY run_id, seq"):
            logs[int(r[0])] = logs.get(int(r[0]), "") + r[1]
    return {"runs": runs, "history": history, "stored": stored, "logs": logs}


def measured_points(path: str | Path) -> dict[str, tuple[str, float]] | None:
    """uid -> (name, value) of the points rank 0 wrote to its file (None: no file)."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    points = {}
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line cut by a killed rank
        if record.get("type") == "metric":
            points[record["uid"]] = (record["name"], record["value"])
    return points


def model_records(home: Path, run_ids: list[int]) -> dict[int, dict[str, Any]]:
    """run -> the audit record of its final model, read as the master wrote it under its
    home `home` (model_files.folder: ``models/<run id>/audit.json``), for the runs that
    posted a model. The record as stored, not as the API reads it: after `mlbench down`
    every grade still "pending" would read "interrupted" there."""
    found = {}
    for run_id in run_ids:
        record = model_files.read(home / "models" / str(run_id))
        if record is not None:
            found[run_id] = record
    return found


def launch_folders(home: Path) -> dict[int, int]:
    """How many launch folders (`local-cluster/run-<id>-<launch>`) each run has."""
    counts: dict[int, int] = {}
    for folder in (home / "local-cluster").glob("run-*-*"):
        run_id = folder.name.split("-")[1]
        if folder.is_dir() and run_id.isdigit():
            counts[int(run_id)] = counts.get(int(run_id), 0) + 1
    return counts


def gather(
    database_url: str,
    submitted: list[Submitted],
    faults: list[Fault],
    polls: list[Poll],
    leftovers: list[str],
    home: Path | None = None,
    unfinished: dict[int, str] | None = None,
    master_home: Path | None = None,
) -> Evidence:
    """Everything the invariants look at, after the series. `home`: the local driver's
    home, whose launch folders are counted; `master_home`: the master's home, whose model
    records are read (either driver)."""
    found = from_database(database_url)
    measured = {}
    for run in submitted:
        if run.points_file:
            points = measured_points(run.points_file.replace("{run_id}", str(run.run_id)))
            if points is not None:
                measured[run.run_id] = points
    return Evidence(
        submitted=submitted,
        runs=found["runs"],
        history=found["history"],
        stored=found["stored"],
        measured=measured,
        logs=found["logs"],
        faults=faults,
        polls=polls,
        leftovers=leftovers,
        launch_dirs=launch_folders(home) if home else {},
        unfinished=dict(unfinished or {}),
        models=model_records(master_home, [r.run_id for r in submitted]) if master_home else {},
    )
