"""The promises a chaos series checks, as plain functions of the evidence: each returns the
violations it finds (a sentence each, naming the run or fault), none when it holds.

tests/chaos/test_invariants.py feeds every check a planted defect and clean data, so a
check that could never fail is caught.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections import Counter
from collections.abc import Callable

from mlbench_worker.shared import catalogue
from mlbench_worker.shared.evaluation import GRADED_PREFIX, graded_name, model_audit, test_sets
from tests.chaos import reasons
from tests.chaos.evidence import FINAL, Change, Evidence, Submitted
from tests.chaos.faults import Fault

GRACE = 2.0  # seconds after a fault ended during which a run that was active counts as hit
HEALTH_BOUND = 60.0  # seconds after a fault ended within which the health check must say 200
# Every move runs.py may make; anything else is a state written by someone who must not.
ALLOWED_MOVES = {
    ("QUEUED", "INITIALIZED"), ("QUEUED", "CANCELLED"),
    ("INITIALIZED", "QUEUED"), ("INITIALIZED", "STARTED"),
    ("INITIALIZED", "FAILED"), ("INITIALIZED", "CANCELLED"), ("INITIALIZED", "FINISHED"),
    ("STARTED", "FINISHED"), ("STARTED", "FAILED"), ("STARTED", "CANCELLED"),
}  # fmt: skip
UNDELIVERED = re.compile(r"could not be delivered|could not deliver the run summary|refused \d+")
# prediction_sink.submit_model: the worker could not export its final model
NOT_EXPORTED = re.compile(r"the final model is not exported to ONNX \([^)\n]*\)?")
# The faults that end the master's web server, where a posted model's grade runs.
ENDS_A_GRADE = ("web-kill", "master-restart")


def _state_writes(changes: list[Change]) -> list[Change]:
    """The writes of a state: the insert, every change, and every rewrite of a final state."""
    return [c for c in changes if c.op in ("insert", "state", "rewrite")]


def final_write(ev: Evidence, run_id: int) -> Change | None:
    return next((c for c in _state_writes(ev.changes(run_id)) if c.new in FINAL), None)


def one_end_state(ev: Evidence) -> list[str]:
    """Every run ended in exactly one final state, reached by moves runs.py may make, and
    nothing was written to its state after that."""
    problems = []
    for run in ev.submitted:
        writes = _state_writes(ev.changes(run.run_id))
        finals = [c for c in writes if c.new in FINAL]
        for c in writes:
            if c.op == "state" and (c.old, c.new) not in ALLOWED_MOVES:
                problems.append(f"run {run.run_id}: moved {c.old} -> {c.new}")
        if len(finals) > 1:
            said = ", ".join(f"{c.new} ({c.reason[:60]!r})" for c in finals)
            problems.append(f"run {run.run_id}: a final state written {len(finals)} times: {said}")
        elif finals and writes[-1] is not finals[0]:
            problems.append(f"run {run.run_id}: written {writes[-1].new} after it ended")
        if run.run_id in ev.unfinished:
            problems.append(
                f"run {run.run_id}: still {ev.unfinished[run.run_id]} when the series ended"
            )
        elif writes and not finals:
            problems.append(f"run {run.run_id}: left {writes[-1].new} without a final state")
    return problems


def no_run_lost(ev: Evidence) -> list[str]:
    """Every run asked for is stored and ended, or was deleted by the series' own cancel;
    no run is stored that nobody asked for."""
    problems = []
    asked = {r.run_id for r in ev.submitted}
    cancelled = {f.run_id for f in ev.faults if f.kind == "cancel" and not f.skipped}
    for run in ev.submitted:
        ops = [c.op for c in ev.changes(run.run_id)]
        if "insert" not in ops and run.run_id not in ev.runs:
            problems.append(f"run {run.run_id} ({run.label}): never stored")
        elif run.run_id not in ev.runs and run.run_id not in cancelled:
            problems.append(
                f"run {run.run_id} ({run.label}): gone, though the series did not delete it"
            )
    for run_id in sorted(set(ev.runs) - asked):
        problems.append(f"run {run_id}: stored, but the series never asked for it")
    return problems


def no_run_twice(ev: Evidence) -> list[str]:
    """Every run was launched once (twice only where its log says the launch was retried)
    and started once."""
    problems = []
    for run in ev.submitted:
        changes = ev.changes(run.run_id)
        launches = list(dict.fromkeys(c.launch for c in changes if c.launch))
        folders = ev.launch_dirs.get(run.run_id, 0)
        allowed = 2 if re.search(reasons.RETRY_WORDS, ev.logs.get(run.run_id, ""), re.I) else 1
        if max(len(launches), folders) > allowed:
            problems.append(
                f"run {run.run_id}: launched {max(len(launches), folders)} times "
                f"(launch ids {launches}, {folders} launch folders)"
            )
        starts = [c for c in _state_writes(changes) if c.new == "STARTED" and c.old != "STARTED"]
        if len(starts) > 1:
            problems.append(f"run {run.run_id}: STARTED {len(starts)} times")
    return problems


def active_span(ev: Evidence, run_id: int) -> tuple[float, float] | None:
    """When the run held the workers: from leaving the queue to its end (or deletion)."""
    changes = ev.changes(run_id)
    begin = next((c.at for c in changes if c.new in ("INITIALIZED", "STARTED")), None)
    if begin is None:
        return None
    end = next((c.at for c in changes if c.new in FINAL or c.op == "delete"), float("inf"))
    return begin, end


def hits(ev: Evidence, run_id: int) -> list[Fault]:
    """The faults that hit the run: aimed at it, or done while it was active."""
    span = active_span(ev, run_id)
    found = []
    for fault in ev.faults:
        if fault.skipped or fault.start is None:
            continue
        aimed = fault.run_id == run_id
        end = (fault.end or fault.start) + GRACE
        during = span is not None and span[0] <= end and fault.start <= span[1]
        if aimed or (during and fault.kind != "cancel"):
            found.append(fault)
    return found


def reason_names_fault(ev: Evidence) -> list[str]:
    """A run that FAILED or was CANCELLED says why, naming a fault that hit it: never a
    failure without a fault, never a fault the platform promises to survive as the only
    one, never a cancel nobody asked for."""
    problems = []
    for run in ev.submitted:
        final = final_write(ev, run.run_id)
        if final is None or final.new == "FINISHED":
            continue
        reason = ev.runs.get(run.run_id, {}).get("reason") or final.reason
        hit = hits(ev, run.run_id)
        kinds = sorted({f.kind for f in hit})
        said = f"{final.new}: {reason[:300]!r}"
        if final.new == "CANCELLED":
            if not any(f.kind == "cancel" for f in hit):
                problems.append(f"run {run.run_id} {said}, though the series did not cancel it")
            elif not any(reasons.names(reason, "cancel", f.details) for f in hit):
                problems.append(f"run {run.run_id} {said}: the reason does not name the cancel")
            continue
        blamable = [f for f in hit if not reasons.survivable(f.kind)]
        if not hit:
            problems.append(f"run {run.run_id} ({run.label}) {said}, with no fault injected")
        elif not blamable:
            problems.append(
                f"run {run.run_id} ({run.label}) {said}; only faults it must survive hit it: {kinds}"
            )
        elif not any(reasons.names(reason, f.kind, f.details) for f in blamable):
            wanted = [p for f in blamable for p in reasons.patterns(f.kind, f.details)]
            problems.append(
                f"run {run.run_id} ({run.label}) {said}; hit by {kinds}, the reason names none "
                f"(wanted one of {wanted})"
            )
    return problems


def _point_key(point: object) -> tuple:
    """A measurement's identity: a point resent under a new uid keeps all of it."""
    meta = json.dumps(point.metadata, sort_keys=True)  # type: ignore[attr-defined]
    return (point.name, point.date, point.value, meta)  # type: ignore[attr-defined]


def _graded(point: object) -> bool:
    """A grade the master's evaluator stored (evaluated_*), not a point the run measured."""
    return point.name.startswith(GRADED_PREFIX)  # type: ignore[attr-defined]


def metrics_once(ev: Evidence) -> list[str]:
    """No point is stored twice (by uid, or the same measurement under two uids), and every
    point stored for a run whose rank 0 kept a record is one it measured, with its value.
    The evaluator's grades are the master's own points: one per metric and step."""
    problems = []
    for run_id, stored_points in sorted(ev.stored.items()):
        grades = Counter((p.name, p.metadata.get("step")) for p in stored_points if _graded(p))
        for (name, step), n in sorted(grades.items(), key=str):
            if n > 1:
                problems.append(f"run {run_id}: {name} of step {step} stored {n} times")
        points = [p for p in stored_points if not _graded(p)]
        uids = Counter(p.uid for p in points if p.uid)
        for uid, n in uids.items():
            if n > 1:
                problems.append(f"run {run_id}: point {uid} stored {n} times")
        same = [key for key, n in Counter(_point_key(p) for p in points).items() if n > 1]
        for name, date, value, _ in same[:5]:
            problems.append(f"run {run_id}: {name}={value} measured at {date} stored twice")
        measured = ev.measured.get(run_id)
        if measured is None:
            continue
        unknown = [p for p in points if p.uid not in measured]
        if unknown:
            problems.append(
                f"run {run_id}: {len(unknown)} stored points rank 0 never measured "
                f"(e.g. {unknown[0].name} uid {unknown[0].uid})"
            )
        wrong = [p for p in points if p.uid in measured and measured[p.uid] != (p.name, p.value)]
        if wrong:
            problems.append(f"run {run_id}: {len(wrong)} stored points differ from rank 0's record")
    return problems


def _ungraded_steps(points: list) -> list:
    """The steps a run reported an accuracy for and the evaluator has no grade of (every
    implementation of a task graded from predictions posts them with each evaluation,
    retried like its points)."""
    reported = {p.metadata.get("step") for p in points if p.name == "val_accuracy"}
    graded = {p.metadata.get("step") for p in points if p.name == graded_name("val_accuracy")}
    return sorted(reported - graded, key=str)


def _last_evaluation(task: str, points: list) -> int | None:
    """The step of the last evaluation a run reported its task's goal metric at (task 3's
    val_perplexity): the one its final model is graded at."""
    info = catalogue.get(task)
    metric = info.goals[info.default_goal].metric
    steps = [p.metadata.get("step") for p in points if p.name == metric]
    return max((s for s in steps if isinstance(s, int)), default=None)


def _cut_short(ev: Evidence, record: dict) -> list[Fault]:
    """The faults that ended the web server after the model's grade began: the grade runs
    in a thread of it and a child that ends with it (model_auditing.py), so its record
    stays "pending" (the API reads it "not audited: interrupted"; post the model again)."""
    try:
        since = dt.datetime.fromisoformat(record["since"]).timestamp()
    except (KeyError, TypeError, ValueError):
        return []
    return [
        f
        for f in ev.faults
        if f.kind in ENDS_A_GRADE and not f.skipped and f.start is not None
        and (f.end or f.start) >= since
    ]  # fmt: skip


def _model_not_graded(ev: Evidence, run: Submitted) -> str:
    """Why a FINISHED run of a task graded from its final model has no grade of it, or ""
    when it has one: the model arrived (the worker posts it after its summary, before it
    ends), its grade completed (matches or mismatch: the grade exists; whether it agrees
    with the run is the run's result, not a loss) at the run's last evaluation, or was cut
    short by a fault that ended the master's web server."""
    record = ev.models.get(run.run_id)
    if record is None:
        said = NOT_EXPORTED.search(ev.logs.get(run.run_id, ""))
        because = f" (its log says {said.group(0)!r})" if said else ""
        return f"its final model never arrived: the master holds no model of it{because}"
    status = record.get("status")
    if status in (model_audit.MATCHES, model_audit.MISMATCH):
        last = _last_evaluation(run.task, ev.stored.get(run.run_id, []))
        if record.get("step") != last:
            return (
                f"its final model was graded at step {record.get('step')}, not at its last "
                f"evaluation (step {last})"
            )
        return ""
    if status == model_audit.PENDING:
        if _cut_short(ev, record):
            return ""
        since = record.get("since")
        return f"the grade of its final model never completed (still pending since {since})"
    why = str(record.get("why") or "")[:200]
    return f"its final model was not graded: {status} ({why!r})"


def metrics_complete(ev: Evidence) -> list[str]:
    """A run that FINISHED lost no point: every point rank 0 measured is stored; for a run
    whose rank 0 kept no record, its summary arrived and its log says nothing was dropped.
    And it has the grade its task gets: for a task graded from predictions (1a, 1b, 2),
    every evaluation it reported; for one graded from its final model (task 3), that model
    (test_sets.grades_the_model decides which)."""
    problems = []
    for run in ev.submitted:
        final = final_write(ev, run.run_id)
        if final is None or final.new != "FINISHED" or run.run_id not in ev.runs:
            continue
        if run.points_file:
            measured = ev.measured.get(run.run_id)
            if measured is None:
                problems.append(f"run {run.run_id} FINISHED, but rank 0 left no record of points")
                continue
            stored = {p.uid for p in ev.stored.get(run.run_id, [])}
            missing = set(measured) - stored
            if missing:
                problems.append(
                    f"run {run.run_id} FINISHED with {len(missing)} of {len(measured)} "
                    "measured points not stored"
                )
        elif _trains(run) and not ev.runs[run.run_id]["has_summary"]:
            problems.append(f"run {run.run_id} ({run.label}) FINISHED without its summary")
        if test_sets.grades_the_model(run.task):
            why = _model_not_graded(ev, run)
            if why:
                problems.append(f"run {run.run_id} ({run.label}) FINISHED, but {why}")
        else:
            ungraded = _ungraded_steps(ev.stored.get(run.run_id, []))
            if ungraded:
                problems.append(
                    f"run {run.run_id} FINISHED with evaluations never graded (steps "
                    f"{', '.join(map(str, ungraded[:5]))}): its predictions were lost"
                )
        said = UNDELIVERED.search(ev.logs.get(run.run_id, ""))
        if said:
            problems.append(f"run {run.run_id} FINISHED, but its log says {said.group(0)!r}")
    return problems


def _trains(run: Submitted) -> bool:
    """Whether the run runs our worker (an open-division command posts nothing)."""
    return not run.label.startswith(("python -c", "sleep"))


def nothing_left(ev: Evidence) -> list[str]:
    """After `mlbench down`, nothing of the master exists any more."""
    return [f"left behind: {item}" for item in ev.leftovers]


def _bad(status: int | None) -> bool:
    return status is not None and status >= 500 and status != 503


def api_answered(ev: Evidence) -> list[str]:
    """The API never answered 500 (503, "try again", is allowed while a service is down),
    and after each fault the health check said 200 within HEALTH_BOUND seconds."""
    problems = []
    bad = [p for p in ev.polls if _bad(p.status)]
    for path, n in Counter(p.path for p in bad).items():
        first = next(p for p in bad if p.path == path)
        problems.append(f"GET {path} answered {first.status} {n} times (first: {first.error!r})")
    for fault in ev.faults:
        if fault.skipped or fault.start is None or fault.end is None:
            continue
        back = api_back(ev, fault)
        later = [p for p in ev.polls if p.at >= fault.end + HEALTH_BOUND]
        if back is None and later:
            problems.append(f"fault {fault.n} ({fault.kind}): no healthy answer afterwards")
        elif back is not None and fault.start + back - fault.end > HEALTH_BOUND:
            after = fault.start + back - fault.end
            problems.append(f"fault {fault.n} ({fault.kind}): healthy again {after:.0f} s after it")
    return problems


def api_back(ev: Evidence, fault: Fault) -> float | None:
    """Seconds from the fault's start to the health check's first 200 once it was over."""
    assert fault.start is not None and fault.end is not None
    for poll in ev.polls:
        if poll.path == "/api/health/" and poll.at >= fault.end and poll.status == 200:
            return poll.at - fault.start
    return None


def recovered(ev: Evidence) -> list[str]:
    """Each fault was done and what it stopped came back (an injector's error says what
    did not: e.g. a service the supervisor never started again)."""
    return [
        f"fault {f.n} ({f.kind}): {f.details['error']}" for f in ev.faults if "error" in f.details
    ]


INVARIANTS: dict[str, Callable[[Evidence], list[str]]] = {
    "one end state": one_end_state,
    "no run lost": no_run_lost,
    "no run twice": no_run_twice,
    "reason names the fault": reason_names_fault,
    "no point stored twice": metrics_once,
    "no point lost": metrics_complete,
    "nothing left": nothing_left,
    "API answered": api_answered,
    "recovered": recovered,
}


def check(ev: Evidence) -> dict[str, list[str]]:
    """Every invariant's violations (an empty list where it holds)."""
    return {name: rule(ev) for name, rule in INVARIANTS.items()}
