# Over 400 lines: every rule of a run's state lives here by design (the ONLY module that changes
# Run.state), the read-only rule of imported runs included.
"""The run lifecycle: the ONLY module that changes `Run.state`, and the one place that
creates, queues, cancels, deletes a run and stores what its job and workers report about it.

The master's queue is the QUEUED runs, first asked first run (`queued_runs`); whenever the
active run ends, whichever way, `start_next` starts the first of them.

Every transition is one conditional UPDATE (`WHERE state IN (...)`), so it is atomic and
idempotent against races: two callers cannot both move a run, and a run in a final state
(FINISHED, FAILED, CANCELLED) is never moved back. Callers get True when their transition
happened and the in-memory `run` is refreshed either way.

Drivers never see the `Run` row: `run_spec` makes the frozen snapshot they read. The RQ
job is enqueued by dotted path (jobqueue.py), so this module does not import the
orchestration code.

What a run may ask for and what it gets for what it leaves out are the run rules' (run_rules/): this
module stores what `run_rules.resolve` returns.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Callable, Iterable
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from mlbench_master import run_rules
from mlbench_master.api.models import Metric, Run, RunOrigin
from mlbench_master.cluster import drivers
from mlbench_master.cluster.base import RunSpec
from mlbench_master.grading import model_files, prediction_files
from mlbench_master.results import prices
from mlbench_master.runs import jobqueue
from mlbench_master.runs.manifest import build_manifest
from mlbench_master.runs.run_queue import queued_runs
from mlbench_worker.shared import catalogue
from mlbench_worker.shared.evaluation import GRADED_PREFIX

log = logging.getLogger(__name__)

TOKEN_PREFIX = "mlbr"


class RunConflict(Exception):
    """Another run is active, or runs wait in the queue (the API answers 409)."""

    def __init__(self, active: Run | None, queued: int = 0) -> None:
        self.active = active
        if active is not None:
            what = f"run {active.pk} ({active.name!r}, {active.state}) is active"
        elif queued:
            what = "1 run waits in the queue" if queued == 1 else f"{queued} runs wait in the queue"
        else:
            what = "another run is active"
        super().__init__(
            f"{what}; wait for it to end, delete it, or ask to queue behind it "
            '("queue": true; mlbench run --queue)'
        )


class QueueUnavailable(Exception):
    """Redis could not take the run's job (the API answers 503; the run is FAILED)."""


class ReadOnlyRun(Exception):
    """A run imported from another installation is its origin's record: nothing changes it
    (the API answers 409), and only staff may delete it (`staff_may`: 403 for others)."""

    def __init__(self, run_id: int, origin: str, what: str, staff_may: bool = False) -> None:
        super().__init__(
            f"run {run_id} was imported from installation {origin} and is read-only: {what}"
            + (" (only a staff user may delete it)" if staff_may else "")
        )
        self.staff_may = staff_may


def refuse_imported(run_ids: Iterable[int], what: str, staff_may: bool = False) -> None:
    """ReadOnlyRun for the first imported run among `run_ids` (their points, summary or
    predictions would change its origin's record)."""
    found = RunOrigin.objects.filter(run_id__in=list(run_ids)).order_by("run_id").first()
    if found is not None:
        raise ReadOnlyRun(found.run_id, found.origin_fingerprint, what, staff_may)


def store_imported(
    fields: dict[str, Any], state: str, series: Any = None, launch: dict[str, Any] | None = None
) -> Run:
    """Store a run another installation ran, in the final state it ended in there. Its
    RunOrigin is stored by the caller in the same transaction (bundles/importer.py); no job is
    enqueued and no driver is asked, now or later: only active runs reach them. `launch`: what
    of its origin's launch record travelled (its nodes), kept as its own so that its cost is
    the origin's (results/cost.py)."""
    if state not in Run.FINAL_STATES:
        raise ValueError(f"an imported run must have ended, not be {state!r:.40}")
    run = Run(**fields, state=state, series=series, job_metadata=dict(launch or {}))
    run.full_clean(exclude=["series", "created_by"], validate_constraints=False)
    run.save()
    return run


def join_imported_series(series: Any, run_ids: list[int]) -> int:
    """Put imported runs that belong to no series into `series`, the one their origin ran
    them in (bundles/importer.py found it by the runs' origin): runs imported one bundle at a
    time before or after their series make the same series as the series imported at once.
    A run already in a series stays there. Returns how many joined."""
    return Run.objects.filter(pk__in=run_ids, series=None).update(series=series)


def recover_imported_test_set(run: Run) -> None:
    """For a run imported from a bundle made before runs recorded `test_examples`: the
    number its origin's evaluator graded on (the `examples` its grades record), where they
    all say the same; left null (the whole set) otherwise. The bundle's signature vouches
    for the grades as it would for the field."""
    if run.test_examples is not None:
        return
    counts = {
        meta.get("examples")
        for meta in Metric.objects.filter(run=run, name__startswith=GRADED_PREFIX).values_list(
            "metadata", flat=True
        )
        if isinstance(meta, dict)
    }
    if len(counts) == 1 and isinstance(n := counts.pop(), int) and n > 0:
        run.test_examples = n
        run.save(update_fields=["test_examples"])


def active_run() -> Run | None:
    """The run that is INITIALIZED or STARTED, if any (at most one exists)."""
    return Run.objects.filter(state__in=Run.ACTIVE_STATES).order_by("created_at").first()


def creator(user: Any) -> Any | None:
    """Who a new run or series is recorded as created by (`created_by`): the signed-in
    user, else nobody (anonymous, or a principal that is no stored user)."""
    return user if getattr(user, "is_authenticated", False) and user.pk else None


def new_run(fields: dict[str, Any], user: Any, state: str, series: Any = None) -> Run:
    """Store a run with `fields` (what run_rules.resolve returned for its request) in
    `state`, its manifest built, as a member of `series` if given.

    Called inside the transaction that checks the queue: a resumed parent is read again
    there (it may have been deleted since it was resolved: ResumeRefused).
    """
    fields = dict(fields)
    parent_id = fields.pop("resume_from", None)
    resumed = None
    if parent_id is not None:
        resumed = run_rules.resume_point(parent_id, fields)
        fields["resumed_from"] = resumed.run_id
        # "auto" could pick another data set now; the checkpoint's is the experiment.
        fields["dataset"] = resumed.identity.get("dataset") or fields.get("dataset")
    run = Run(**fields, state=state, series=series, created_by=creator(user))
    run.manifest = build_manifest(run, resumed)
    # The prices in force now: the run's cost never follows a later edit of the table.
    run.prices = prices.snapshot()
    run.save()
    return run


def create_run(request: dict[str, Any], user: Any = None, queue: bool = False) -> Run:
    """Store a new run for `request` (the parsed fields of POST /api/runs/) and start it:
    at once, or with `queue` after the runs before it in the master's queue (it is
    QUEUED until then).

    Its fields come from run_rules.resolve (RunRefused, StaffOnly when a rule is broken).
    Without `queue`, raises RunConflict when a run is active or runs are queued (a unique
    index makes this safe against simultaneous requests), and QueueUnavailable when Redis
    cannot be reached; in that case the run is kept, FAILED, with the reason.
    """
    filled = run_rules.fill(request)
    fields = run_rules.resolve(filled, user, run_rules.cluster_limits(filled))
    try:
        with transaction.atomic():
            if not queue:
                waiting = queued_runs().count()
                if active_run() is not None or waiting:
                    raise RunConflict(active_run(), waiting)
            run = new_run(fields, user, Run.QUEUED if queue else Run.INITIALIZED)
    except IntegrityError as exc:
        if "run_one_active" in str(exc):
            raise RunConflict(active_run()) from exc
        raise
    if queue:
        start_next()
        run.refresh_from_db()
    else:
        enqueue_run(run)
    return run


def start_next() -> Run | None:
    """When no run is active, the first queued run becomes INITIALIZED and its job is
    enqueued; that run, or None when there was nothing to start.

    Called whenever a run ends (mark_finished, mark_failed, cancel_run), after a run is
    queued, and by every reconciliation (a master restart, the collector's rounds), so the
    queue moves whichever way the active run ended. When Redis refuses the job the run goes
    back to QUEUED with the reason, and the next reconciliation tries again: a Redis blip
    does not fail every queued run.
    """
    try:
        with transaction.atomic():
            if Run.objects.filter(state__in=Run.ACTIVE_STATES).exists():
                return None
            run = queued_runs().first()
            if run is None or not _transition(run, (Run.QUEUED,), state=Run.INITIALIZED, reason=""):
                return None
    except IntegrityError:  # another caller started a run first
        return None
    try:
        run.job_id = _enqueue_job(run)
    except jobqueue.QueueError as exc:
        _transition(
            run, (Run.INITIALIZED,), state=Run.QUEUED,
            reason=f"its job could not be enqueued ({exc}); the master tries again at its "
            "next reconciliation (every 30 s)",
        )  # fmt: skip
        return None
    Run.objects.filter(pk=run.pk).update(job_id=run.job_id)
    return run


def _after_end(run: Run) -> None:
    """A run left the active states: the queue moves on. Never fails the caller's ending
    (the next reconciliation starts the next run when this could not)."""
    try:
        start_next()
    except Exception as exc:  # noqa: BLE001 - the database may be what failed
        log.warning("run %s ended; the next queued run could not be started: %s", run.pk, exc)


def enqueue_run(run: Run) -> str:
    """Put ONE job `mlbench_master.runs.jobs.run_job(run.id)` on the "runs" queue; return its id.

    When Redis fails the run is marked FAILED with the reason and QueueUnavailable
    is raised, so a run is never silently lost.
    """
    try:
        job_id = _enqueue_job(run)
    except jobqueue.QueueError as exc:
        reason = f"could not enqueue the run: {exc}"
        mark_failed(run, reason)
        raise QueueUnavailable(reason) from exc
    Run.objects.filter(pk=run.pk).update(job_id=job_id)
    run.job_id = job_id
    return job_id


def _enqueue_job(run: Run) -> str:
    """The job may take the run's time limit plus a margin for preparing workers and
    cleaning up; jobqueue.QueueError when Redis fails."""
    timeout = int(run.time_limit) + settings.MLBENCH_JOB_TIMEOUT_MARGIN
    return jobqueue.enqueue_run_job(run.pk, timeout, f"run {run.pk}: {run.name}")


def run_spec(run: Run, checkpoints: Callable[[int], str] | None = None) -> RunSpec:
    """The frozen snapshot of `run` that cluster drivers and the mpirun builder read.

    The accuracy goal is resolved here: `light_target` (the seed client's flag) wins over
    `target`; so is the time budget (the run's, else its task's). `launch` is the record of
    the last launch, as the job stored it. `checkpoints` is the driver's `checkpoint_dir`:
    given (by the job, before it builds the command), a reference run gets its checkpoint
    folder and a resumed run the folder of the run it continues.
    """
    checkpoint_dir = resume_dir = ""
    # A measurement (the backend benchmark) has no epochs to checkpoint.
    if checkpoints is not None and not run.open_division and not catalogue.is_measurement(run.task):
        checkpoint_dir = checkpoints(int(run.pk))
        if run.resumed_from is not None:
            resume_dir = checkpoints(int(run.resumed_from))
    return RunSpec(
        id=int(run.pk),
        task=run.task,
        backend=run.backend,
        num_workers=int(run.num_workers),
        num_cpus=float(run.num_cpus),
        max_bandwidth=int(run.max_bandwidth),
        latency_ms=run.latency,
        gpu_enabled=bool(run.gpu_enabled),
        target="light" if run.light_target else (run.target or "standard"),
        dataset=run.dataset or "auto",
        time_budget=run_rules.effective_time_budget(run),
        max_epochs=run.max_epochs,
        time_limit=int(run.time_limit),
        custom_image_name=run.custom_image_name or "",
        custom_image_command=run.custom_image_command or "",
        custom_backend=run.custom_backend or "",
        run_all_nodes=bool(run.run_all_nodes),
        algorithm=run.algorithm or "",
        algorithm_source=run.algorithm_source or "",
        algorithm_options=dict(run.algorithm_options or {}),
        implementation=run.implementation or "",
        seed=int(run.seed),
        lr_schedule=run.lr_schedule or "",
        test_examples=run.test_examples,
        train_examples=run.train_examples,
        batch_size=run.batch_size,
        checkpoint_dir=checkpoint_dir,
        resume_dir=resume_dir,
        launch=dict(run.job_metadata or {}) if isinstance(run.job_metadata, dict) else {},
    )


def record_launch(run: Run, record: dict[str, Any]) -> None:
    """Store the driver's launch record with the run (what re-attach and cancel read)."""
    run.job_metadata = {**(run.job_metadata or {}), **record}
    Run.objects.filter(pk=run.pk).update(job_metadata=run.job_metadata)


def store_summary(run: Run, summary: dict[str, Any], dataset_used: str) -> None:
    """The worker's final summary of `run` and the data set it really used; the manifest
    takes the framework version the workers reported where it had none."""
    refuse_imported([run.pk], "its summary cannot be posted")
    manifest = run_rules.framework_reported(run.manifest or {}, summary)
    Run.objects.filter(pk=run.pk).update(
        summary=summary, dataset_used=dataset_used, manifest=manifest
    )
    run.refresh_from_db()


def delete_run(run: Run, by: str, *, staff: bool = False) -> None:
    """Cancel `run` when it is active (its processes stop), then delete it with its
    metrics, logs, predictions files, its model and checkpoints. An imported run only when `staff`
    asks (ReadOnlyRun otherwise), and without a driver: it has no checkpoints here.

    Nothing can resume a deleted run, so its checkpoint folder goes too, unless an active
    run is about to continue from it (its worker copies the checkpoint when it starts).
    """
    if RunOrigin.objects.filter(run_id=run.pk).exists():
        if not staff:
            refuse_imported([run.pk], "it cannot be deleted", staff_may=True)
        prediction_files.remove(int(run.pk))
        model_files.remove(int(run.pk))
        _delete_locked(run)
        return
    cancel_run(run, reason=f"deleted by {by}")
    if not Run.objects.filter(resumed_from=run.pk, state__in=Run.ACTIVE_STATES).exists():
        try:
            drivers.get_driver().delete_checkpoints(int(run.pk))
        except Exception as exc:  # the run is deleted all the same; say what remains
            log.warning("run %s: its checkpoints could not be removed: %s", run.pk, exc)
    prediction_files.remove(int(run.pk))
    model_files.remove(int(run.pk))
    _delete_locked(run)


def _delete_locked(run: Run) -> None:
    """Delete the row and what hangs on it under the row's lock: the run job may still be
    appending the cancelled run's last output (logs.append_logs locks the same row), and
    rows it added between the cascade's reads and the row's delete broke the delete (a 409
    seen under load). With the lock taken first, an appender waits, then finds no run."""
    with transaction.atomic():
        if Run.objects.select_for_update().filter(pk=run.pk).exists():
            run.delete()


def _transition(run: Run, allowed: tuple[str, ...], **changes: Any) -> bool:
    if "reason" in changes:  # from output or an exception: PostgreSQL text holds no NUL
        changes["reason"] = str(changes["reason"]).replace("\x00", "")
    moved = Run.objects.filter(pk=run.pk, state__in=allowed).update(**changes) == 1
    run.refresh_from_db()
    return moved


def mark_started(run: Run) -> bool:
    """INITIALIZED → STARTED (with started_at)."""
    return _transition(run, (Run.INITIALIZED,), state=Run.STARTED, started_at=timezone.now())


def note_waiting(run: Run, reason: str) -> bool:
    """A STARTED run's reason while a scheduler holds its workers in the queue ("" once
    they run); the state does not change. False when the run is no longer STARTED."""
    reason = str(reason).replace("\x00", "")
    moved = Run.objects.filter(pk=run.pk, state=Run.STARTED).update(reason=reason) == 1
    if moved:
        run.reason = reason
    return moved


def mark_finished(run: Run, exit_code: int) -> bool:
    """Active → FINISHED, only for exit code 0; any other code makes the run FAILED."""
    if exit_code != 0:
        return mark_failed(run, f"mpirun exited with code {exit_code}", exit_code=exit_code)
    moved = _transition(
        run, Run.ACTIVE_STATES, state=Run.FINISHED, finished_at=timezone.now(), exit_code=0
    )
    if moved:
        _after_end(run)
    return moved


def mark_failed(
    run: Run, reason: str, exit_code: int | None = None, *, start_next_run: bool = True
) -> bool:
    """Active → FAILED with a reason a person can act on. `start_next_run=False` (the
    master is stopping) leaves the queue as it is: its next start moves it."""
    moved = _transition(
        run,
        Run.ACTIVE_STATES,
        state=Run.FAILED,
        reason=reason,
        finished_at=timezone.now(),
        exit_code=exit_code,
    )
    if moved and start_next_run:
        _after_end(run)
    return moved


def cancel_run(run: Run, reason: str = "cancelled by a user") -> bool:
    """Active → CANCELLED; then stop its processes, and its RQ job if it is still queued.

    The state moves first, so the job sees CANCELLED and its own mark_failed() when
    mpirun dies is a no-op. A job that is executing is NOT stopped: its watch loop notices
    the state within a second, kills the ranks and stores their last output, and right
    after a launch it re-checks the state, so an mpirun started just after driver.cancel()
    is killed too (stopping the job's process would lose both). A QUEUED run has no job
    and no processes: it only leaves the queue. Returns False when the run was neither
    active nor queued (nothing to do).
    """
    now = timezone.now()
    if _transition(run, (Run.QUEUED,), state=Run.CANCELLED, reason=reason, finished_at=now):
        return True
    if not _transition(
        run, Run.ACTIVE_STATES, state=Run.CANCELLED, reason=reason, finished_at=timezone.now()
    ):
        return False
    try:
        drivers.get_driver().cancel(run_spec(run))
    except Exception as exc:  # the run stays CANCELLED; say why processes may remain
        log.warning("run %s: the cluster driver could not cancel it: %s", run.pk, exc)
        Run.objects.filter(pk=run.pk).update(reason=f"{reason}; cancel failed: {exc}")
        run.refresh_from_db()
    jobqueue.drop_if_queued(run.job_id)
    _after_end(run)
    return True


def worker_token(run: Run) -> str:
    """The plain token the run's ranks send (`Authorization: Token <it>`).

    It is an HMAC of the run's id and salt under the secret key, so nothing secret is
    stored and the job can re-derive it at any time; it only grants posting metrics and
    the summary of this one run.
    """
    return f"{TOKEN_PREFIX}_{run.pk}_{_token_digest(run.pk, run.token_salt)}"


def _token_digest(run_id: int, salt: str) -> str:
    msg = f"mlbench-run-token:{run_id}:{salt}".encode()
    return hmac.new(settings.SECRET_KEY.encode(), msg, hashlib.sha256).hexdigest()[:40]


def run_for_token(token: str) -> Run | None:
    """The run a worker token belongs to, or None when it is not a valid worker token."""
    parts = token.split("_")
    if (
        len(parts) != 3
        or parts[0] != TOKEN_PREFIX
        or not (parts[1].isascii() and parts[1].isdigit())  # "²" is a digit to isdigit()
        or len(parts[1]) > 19  # an id of a bigint column; int() refuses 4,300 digits
    ):
        return None
    try:  # not .first(): its ORDER BY costs a worker's every post 0.5 ms of CPU here
        run = Run.objects.get(pk=int(parts[1]))
    except Run.DoesNotExist:
        return None
    if not hmac.compare_digest(parts[2], _token_digest(run.pk, run.token_salt)):
        return None
    return run


def is_worker_token(token: str) -> bool:
    """Whether `token` has the worker-token form (checked before user tokens)."""
    return token.startswith(f"{TOKEN_PREFIX}_")
