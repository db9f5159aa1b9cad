"""A run's implementation: which code trains it (mlbench_worker/shared/implementation_catalogue.py
holds the list, the framework each runs on, the algorithms and backends it can run; the
worker checks the same things with the same words).

The backend follows the implementation when the request leaves it to us: torch-ddp runs on
torch.distributed (gloo, or nccl with GPUs), so the platform's default (mpi) becomes gloo
for it; a backend asked for explicitly that it cannot use is refused. tensorflow uses its
own collective ops: asking it for a backend is refused, and the run keeps the default (the
ranks are still started, and their addresses exchanged, through MPI). Those rules are
backends.py's (`chosen_backend`, `takes_backend`), applied here in two steps: the fill sets
a backend left to us (`fill_implementation`), the check refuses one asked for and changes
nothing (`check_implementation`).
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as installed
from typing import Any

from django.conf import settings

from mlbench_master.cluster import drivers
from mlbench_master.cluster.base import ClusterError
from mlbench_master.run_rules.backends import chosen_backend, served_for, takes_backend
from mlbench_master.run_rules.errors import Errors
from mlbench_worker.shared import catalogue, implementation_catalogue
from mlbench_worker.shared.implementation_catalogue import IMPLEMENTATIONS


def _admitted(
    name: str, info: catalogue.TaskInfo | None
) -> implementation_catalogue.Implementation | None:
    """The catalogue's implementation called `name` when the run's task has it."""
    impl = implementation_catalogue.get(name)
    admitted = info.implementations if info is not None else ()
    return impl if impl is not None and name in admitted else None


def fill_implementation(fields: dict[str, Any], asked: Mapping[str, Any],
                        info: catalogue.TaskInfo | None, none: bool) -> None:  # fmt: skip
    """A run with no implementation (`none`: a measurement, a custom command) stores it
    empty; a backend left to us (not asked for) becomes the one the implementation gets
    (backends.chosen_backend: the filled one where it runs on it), in place. An
    implementation the task does not have is left to `check_implementation` to refuse."""
    if none:
        fields["implementation"] = ""
        return
    impl = _admitted(fields["implementation"], info)
    if impl is None or "backend" in asked:
        return
    fields["backend"] = chosen_backend(impl, bool(fields.get("gpu_enabled")), fields["backend"])


def check_implementation(fields: dict[str, Any], asked: Mapping[str, Any],
                         info: catalogue.TaskInfo | None, none: bool,
                         missing_modules: Mapping[str, str], errors: Errors) -> None:  # fmt: skip
    """The implementation one of the task's, able to run the run's algorithm and backend,
    and importable by the workers (`missing_modules`: module -> the Python the cluster
    driver asked, for those it cannot import). A run with no implementation (`none`)
    refuses one asked for by name."""
    name = fields.get("implementation")
    if none:
        if asked.get("implementation"):
            why = ("a custom command trains as it likes" if fields.get("custom_image_command")
                   else f"task {fields['task']} trains nothing")  # fmt: skip
            errors.add("implementation", f"{why}, so it has no implementation; leave "
                       "implementation out")  # fmt: skip
        return
    admitted = info.implementations if info is not None else ()
    impl = implementation_catalogue.get(name)
    if impl is None:
        errors.add("implementation", f"implementation {name!r} is not known (there are "
                   f"{', '.join(IMPLEMENTATIONS)}); task {fields['task']} has "
                   f"{', '.join(admitted) or 'none'}")  # fmt: skip
        return
    if name not in admitted:
        errors.add("implementation", f"implementation {name!r} is not one of task "
                   f"{fields['task']}'s: {', '.join(admitted) or 'none'}")  # fmt: skip
        return
    if fields.get("algorithm") and not impl.admits(fields["algorithm"]):
        errors.add("implementation", impl.algorithm_refusal(fields["algorithm"]))
    if fields.get("gpu_enabled") and not impl.gpu:
        errors.add("gpu_enabled", f"implementation {name} trains on CPUs only; leave "
                   "gpu_enabled out")  # fmt: skip
    _check_backend(impl, fields, asked, errors)
    if not impl.checkpoints and fields.get("resume_from") is not None:
        errors.add("resume_from", f"implementation {name} writes no checkpoints, so a run of "
                   "it cannot resume one; start a fresh run")  # fmt: skip
    missing = [r for r in impl.requirements() if r in missing_modules]
    if missing:
        what = " and ".join(_needed(r) for r in missing)
        errors.add("implementation", f"implementation {name} needs {what} (checked with "
                   f"{missing_modules[missing[0]]}): {impl.install_hint()}, or choose one of "
                   f"{', '.join(i for i in admitted if i != name)}")  # fmt: skip


def _needed(requirement: str) -> str:
    """A missing requirement (Implementation.requirements) in words."""
    if requirement.startswith("program:"):
        return f"{requirement.removeprefix('program:')}, which the workers' PATH lacks"
    return f"{requirement}, which the workers' Python cannot import"


def _check_backend(impl: implementation_catalogue.Implementation, fields: dict[str, Any],
                   asked: Mapping[str, Any], errors: Errors) -> None:  # fmt: skip
    """A backend asked for explicitly must be one the implementation takes (backends.py):
    none but the table's own for one that exchanges with its framework's collective ops
    (which clients send), else one of its own. One left to us was made so by
    `fill_implementation`."""
    backend = fields.get("backend")
    if "backend" not in asked:
        return
    if not takes_backend(impl):
        if backend != "mpi":
            errors.add("backend", f"implementation {impl.name} all-reduces with "
                       f"{impl.own_exchange}; leave backend out")  # fmt: skip
        return
    if impl.backends and backend not in impl.backends:
        errors.add("backend", f"implementation {impl.name} runs on backend "
                   f"{' or '.join(impl.backends)}, not {backend!r}")  # fmt: skip


def catalogue_served(offered: list[str], default_backend: str) -> dict[str, Any]:
    """Every implementation as GET /api/runs/defaults/ serves it, with the tasks (of
    `offered`) that have it, whether this master's workers can run it and the backends a
    run of it may ask for and gets (backends.py; `default_backend`: the table's)."""
    try:
        driver = drivers.get_driver()
    except ClusterError:
        driver = None
    served = {}
    for impl in IMPLEMENTATIONS.values():
        available = _available(driver, impl) if driver is not None else None
        served[impl.name] = {
            "title": impl.title,
            "framework": impl.framework,
            "summary": impl.summary,
            "algorithms": list(impl.algorithms),
            "backends": list(impl.backends),
            "tasks": [t for t in offered if impl.name in catalogue.get(t).implementations],
            "available": available,
            "install": "" if available is not False else impl.install_hint(),
            **served_for(impl, default_backend),
        }
    return served


def _available(driver: Any, impl: implementation_catalogue.Implementation) -> bool | None:
    """Whether the workers have all `impl` requires: False if they lack any, None if the
    driver cannot tell."""
    answers = [driver.has_requirement(r, impl.name) for r in impl.requirements()]
    if False in answers:
        return False
    return None if None in answers else True


# The distributions whose version a framework's runs record (the CPU build of TensorFlow is
# a distribution of its own name).
DISTRIBUTIONS = {
    "pytorch": ("torch",),
    "tensorflow": ("tensorflow", "tensorflow-cpu"),
    "spark": ("pyspark",),
    # flink: none. Its ranks run a Python of their own (MLBENCH_FLINK_PYTHON), never the
    # master's, so its version is always the workers' to report.
}


def framework_of(run: Any) -> dict[str, Any] | None:
    """The manifest's `framework`: the framework `run`'s implementation runs on and, where
    the workers' Python is this master's own (the local driver), its version; elsewhere
    the version is the worker's to report (its summary's `versions`). None for a run that
    trains with nothing of ours."""
    impl = implementation_catalogue.get(run.implementation or "")
    if impl is None:
        return None
    version = None

    if settings.MLBENCH_CLUSTER == "local":
        for name in DISTRIBUTIONS.get(impl.framework, ()):
            try:
                version = installed(name)
                break
            except PackageNotFoundError:
                continue
    return {"name": impl.framework, "version": version,
            "version_from": "master" if version else "worker summary"}  # fmt: skip


def framework_reported(manifest: dict[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
    """`manifest` with its framework's version as the workers reported it in `summary`, where
    the master could not tell it at creation (its workers' Python is not its own: Kubernetes,
    Slurm), so a downloaded manifest says what the run ran on."""
    framework = manifest.get("framework")
    if not isinstance(framework, dict) or framework.get("version"):
        return manifest
    versions = summary.get("versions")
    # The workers report a framework's version under its module's name (torch, tensorflow).
    module = next((i.module for i in IMPLEMENTATIONS.values()
                   if i.framework == framework.get("name")), "")  # fmt: skip
    reported = versions.get(module) if isinstance(versions, dict) else None
    if not isinstance(reported, str) or not reported:
        return manifest
    return {**manifest, "framework": {**framework, "version": reported,
                                      "version_from": "worker summary"}}  # fmt: skip
