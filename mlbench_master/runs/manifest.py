"""A run's manifest: what is needed to reproduce it, as known on the master when it is
created (runs.new_run stores it with the run)."""

from __future__ import annotations

import platform
import subprocess
from importlib.metadata import version
from pathlib import Path
from typing import Any

from django.conf import settings

import mlbench_master
from mlbench_master import run_rules
from mlbench_master.api.models import Run
from mlbench_master.cluster.base import ClusterError, RunSpec
from mlbench_master.cluster.local import slots
from mlbench_master.cluster.slurm.driver import NOT_SHAPED
from mlbench_master.runs import algorithm_files
from mlbench_worker.shared import algorithm_source


def build_manifest(run: Run, resumed: run_rules.ResumePoint | None = None) -> dict[str, Any]:
    """What is needed to reproduce the run, as known on the master at creation time.

    The worker adds what only it knows (seed, torch and MPI versions, hardware) in its
    summary; this records the full requested configuration, the time budget the worker
    will get, the code revision and, for a resumed run, which checkpoint it continues
    (`resumed_from`): its result is not that of a run trained from scratch. The one later
    change: the framework's version, when the master could not read it here, is taken from
    the summary (runs.store_summary).
    """
    config_fields = [
        "name", "task", "algorithm", "algorithm_options", "algorithm_source", "implementation",
        "backend",
        "num_workers", "num_cpus",
        "max_bandwidth", "latency", "gpu_enabled",
        "light_target", "target", "time_budget", "max_epochs", "dataset", "image",
        "custom_image_name", "custom_image_command", "custom_backend", "run_all_nodes",
        "time_limit", "seed", "test_examples", "train_examples", "batch_size",
    ]  # fmt: skip
    try:
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
        shaped = {"max_bandwidth": True, "latency": bool(run.latency)}
        manifest["not_applied"] = {
            k: f"not applied: {NOT_SHAPED}" for k, on in shaped.items() if on
        }
    if run.algorithm_source:
        manifest["algorithm"] = outside_algorithm(run)
    if resumed is not None:
        manifest["resumed_from"] = resumed.record()
    return manifest


def outside_algorithm(run: Run) -> dict[str, Any]:
    """The uploaded algorithm a run trains with: its NAME, the SHA-256 of the file (the
    code itself travels in a bundle beside the run) and the interface version it declares;
    what the configuration's name alone cannot say, since two files may share a NAME."""
    record: dict[str, Any] = {"name": run.algorithm, "sha256": run.algorithm_source}
    source = algorithm_files.source(run.algorithm_source)
    if source is not None:
        declared = algorithm_source.read(source)
        record.update(api=declared.api, size=len(source), class_name=declared.class_name)
    return record


def _git_revision() -> str:
    """The commit of the checkout this master runs from ("" outside a git checkout). The
    root is found from the package, not from this file's depth: moving the module into
    runs/ once made it look one folder too low and record "" for every run."""
    root = Path(mlbench_master.__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return ""
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""
