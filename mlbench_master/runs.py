"""The run lifecycle: the ONLY module that changes `Run.state`, and the one place that
creates, cancels, deletes a run and stores what its job and workers report about it.

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
import platform
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from mlbench_master import jobqueue, run_rules
from mlbench_master.api.models import Run
from mlbench_master.cluster.base import ClusterError, RunSpec
from mlbench_worker import catalogue

log = logging.getLogger(__name__)

TOKEN_PREFIX = "mlbr"


class RunConflict(Exception):
    """Another run is active (the API answers 409)."""

    def __init__(self, active: Run | None) -> None:
        self.active = active
        name = f"run {active.pk} ({active.name!r}, {active.state})" if active else "another run"
        super().__init__(f"{name} is active; wait for it to end or delete it first")


class QueueUnavailable(Exception):
    """Redis could not take the run's job (the API answers 503; the run is FAILED)."""


def active_run() -> Run | None:
    """The run that is INITIALIZED or STARTED, if any (at most one exists)."""
    return Run.objects.filter(state__in=Run.ACTIVE_STATES).order_by("created_at").first()


def create_run(request: dict[str, Any], user: Any = None) -> Run:
    """Store a new run for `request` (the parsed fields of POST /api/runs/) and enqueue its
    job.

    Its fields come from run_rules.resolve (RunRefused, StaffOnly when a rule is broken).
    Raises RunConflict when a run is already active (a unique index makes this safe
    against simultaneous requests) and QueueUnavailable when Redis cannot be reached;
    in that case the run is kept, FAILED, with the reason.
    """
    fields = run_rules.resolve(request, user)
    parent_id = fields.pop("resume_from", None)
    created_by = user if getattr(user, "is_authenticated", False) and user.pk else None
    try:
        with transaction.atomic():
            if active_run() is not None:
                raise RunConflict(active_run())
            resumed = None
            if parent_id is not None:
                # Read again here: the parent may have been deleted since it was resolved.
                resumed = run_rules.resume_point(
                    parent_id,
                    task=fields.get("task"),
                    num_workers=int(fields["num_workers"]),
                    dataset=fields.get("dataset"),
                    algorithm=fields.get("algorithm") or None,
                    algorithm_options=fields.get("algorithm_options"),
                )
                fields["resumed_from"] = resumed.run_id
                # "auto" could pick another data set now; the checkpoint's is the experiment.
                fields["dataset"] = resumed.identity.get("dataset") or fields.get("dataset")
            run = Run(**fields, state=Run.INITIALIZED, created_by=created_by)
            run.manifest = build_manifest(run, resumed)
            run.save()
    except IntegrityError as exc:
        if "run_one_active" in str(exc):
            raise RunConflict(active_run()) from exc
        raise
    enqueue_run(run)
    return run


def build_manifest(run: Run, resumed: run_rules.ResumePoint | None = None) -> dict[str, Any]:
    """What is needed to reproduce the run, as known on the master at creation time.

    The worker adds what only it knows (seed, torch and MPI versions, hardware) in its
    summary; this records the full requested configuration, the time budget the worker
    will get, the code revision and, for a resumed run, which checkpoint it continues
    (`resumed_from`): its result is not that of a run trained from scratch.
    """
    config_fields = [
        "name", "task", "algorithm", "algorithm_options", "implementation", "backend",
        "num_workers", "num_cpus",
        "max_bandwidth", "latency", "gpu_enabled",
        "light_target", "target", "time_budget", "max_epochs", "dataset", "image",
        "custom_image_name", "custom_image_command", "custom_backend", "run_all_nodes",
        "time_limit",
    ]  # fmt: skip
    try:
        from importlib.metadata import version

        mlbench_version = version("mlbench")
    except Exception:  # not installed as a distribution
        mlbench_version = "unknown"
    manifest: dict[str, Any] = {
        "config": {
            **{f: getattr(run, f) for f in config_fields},
            "effective_time_budget": run_rules.effective_time_budget(run),
            "time_budget_source": run_rules.budget_source(
                run.task, run.time_budget, run.time_limit, run.open_division
            ),
        },
        "setup": run_rules.setup_of(run),
        "framework": run_rules.framework_of(run),
        "mlbench": mlbench_version,
        "git_revision": _git_revision(),
        "master": {"python": platform.python_version(), "cluster": settings.MLBENCH_CLUSTER},
    }
    if settings.MLBENCH_CLUSTER == "local":
        # Whether the slots can be hosts of their own is known now (the master's rights,
        # the kernel's qdiscs); the launch record says what was really applied.
        from mlbench_master.cluster.local import slots

        try:
            plan = slots.plan(
                RunSpec(id=0, max_bandwidth=int(run.max_bandwidth), latency_ms=run.latency)
            )
        except ClusterError as exc:  # MLBENCH_LOCAL_NETWORK=namespaces and it cannot be
            plan = {"max_bandwidth": {"applied": False, "why": str(exc)}}
        manifest["network"] = plan
        not_applied = {
            name: f"not applied: {note['why']}"
            for name, note in plan.items()
            if not note.get("applied") and note.get("why")
        }
        if not_applied:
            manifest["not_applied"] = not_applied
    if settings.MLBENCH_CLUSTER == "slurm":
        from mlbench_master.cluster.slurm.driver import NOT_SHAPED

        shaped = {"max_bandwidth": True, "latency": bool(run.latency)}
        manifest["not_applied"] = {
            k: f"not applied: {NOT_SHAPED}" for k, on in shaped.items() if on
        }
    if resumed is not None:
        manifest["resumed_from"] = resumed.record()
    return manifest


def _git_revision() -> str:
    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return ""
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def enqueue_run(run: Run) -> str:
    """Put ONE job `mlbench_master.jobs.run_job(run.id)` on the "runs" queue; return its id.

    The job may take the run's time limit plus a margin for preparing workers and cleaning
    up. When Redis fails the run is marked FAILED with the reason and QueueUnavailable
    is raised, so a run is never silently lost.
    """
    timeout = int(run.time_limit) + settings.MLBENCH_JOB_TIMEOUT_MARGIN
    try:
        job_id = jobqueue.enqueue_run_job(run.pk, timeout, f"run {run.pk}: {run.name}")
    except jobqueue.QueueError as exc:
        reason = f"could not enqueue the run: {exc}"
        mark_failed(run, reason)
        raise QueueUnavailable(reason) from exc
    Run.objects.filter(pk=run.pk).update(job_id=job_id)
    run.job_id = job_id
    return job_id


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
        algorithm_options=dict(run.algorithm_options or {}),
        implementation=run.implementation or "",
        checkpoint_dir=checkpoint_dir,
        resume_dir=resume_dir,
        launch=dict(run.job_metadata or {}) if isinstance(run.job_metadata, dict) else {},
    )


def record_launch(run: Run, record: dict[str, Any]) -> None:
    """Store the driver's launch record with the run (what re-attach and cancel read)."""
    run.job_metadata = {**(run.job_metadata or {}), **record}
    Run.objects.filter(pk=run.pk).update(job_metadata=run.job_metadata)


def store_summary(run: Run, summary: dict[str, Any], dataset_used: str) -> None:
    """The worker's final summary of `run` and the data set it really used."""
    Run.objects.filter(pk=run.pk).update(summary=summary, dataset_used=dataset_used)
    run.refresh_from_db()


def delete_run(run: Run, by: str) -> None:
    """Cancel `run` when it is active (its processes stop), then delete it with its
    metrics, logs and checkpoints.

    Nothing can resume a deleted run, so its checkpoint folder goes too, unless an active
    run is about to continue from it (its worker copies the checkpoint when it starts).
    """
    cancel_run(run, reason=f"deleted by {by}")
    if not Run.objects.filter(resumed_from=run.pk, state__in=Run.ACTIVE_STATES).exists():
        try:
            from mlbench_master.cluster.drivers import get_driver

            get_driver().delete_checkpoints(int(run.pk))
        except Exception as exc:  # the run is deleted all the same; say what remains
            log.warning("run %s: its checkpoints could not be removed: %s", run.pk, exc)
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
    return _transition(
        run, Run.ACTIVE_STATES, state=Run.FINISHED, finished_at=timezone.now(), exit_code=0
    )


def mark_failed(run: Run, reason: str, exit_code: int | None = None) -> bool:
    """Active → FAILED with a reason a person can act on."""
    return _transition(
        run,
        Run.ACTIVE_STATES,
        state=Run.FAILED,
        reason=reason,
        finished_at=timezone.now(),
        exit_code=exit_code,
    )


def cancel_run(run: Run, reason: str = "cancelled by a user") -> bool:
    """Active → CANCELLED; then stop its processes, and its RQ job if it is still queued.

    The state moves first, so the job sees CANCELLED and its own mark_failed() when
    mpirun dies is a no-op. A job that is executing is NOT stopped: its watch loop notices
    the state within a second, kills the ranks and stores their last output, and right
    after a launch it re-checks the state, so an mpirun started just after driver.cancel()
    is killed too (stopping the job's process would lose both). Returns False when the
    run was not active (nothing to do).
    """
    if not _transition(
        run, Run.ACTIVE_STATES, state=Run.CANCELLED, reason=reason, finished_at=timezone.now()
    ):
        return False
    try:
        from mlbench_master.cluster.drivers import get_driver

        get_driver().cancel(run_spec(run))
    except Exception as exc:  # the run stays CANCELLED; say why processes may remain
        log.warning("run %s: the cluster driver could not cancel it: %s", run.pk, exc)
        Run.objects.filter(pk=run.pk).update(reason=f"{reason}; cancel failed: {exc}")
        run.refresh_from_db()
    jobqueue.drop_if_queued(run.job_id)
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
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX or not parts[1].isdigit():
        return None
    run = Run.objects.filter(pk=int(parts[1])).first()
    if run is None:
        return None
    if not hmac.compare_digest(parts[2], _token_digest(run.pk, run.token_salt)):
        return None
    return run


def is_worker_token(token: str) -> bool:
    """Whether `token` has the worker-token form (checked before user tokens)."""
    return token.startswith(f"{TOKEN_PREFIX}_")
