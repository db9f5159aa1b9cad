"""A study request checked whole before anything is stored, and turned into its cells.

Why whole: a study is hundreds of runs; a refusal found at the 80th cell's turn would leave
79 queued that mean nothing alone. Every cell's series goes through the run rules here
(runs/series.resolve_series, the rules of a single run), and a refusal is answered as one
400 naming the study's own field: `algorithms` (with the algorithm), `workloads`,
`conditions` (a rate or delay this driver cannot make or this master does not allow),
`seeds`, `num_workers`, or `runs` for more runs than MLBENCH_STUDY_MAX_RUNS.

The held-out variants are drawn from `variant_seed` only after every algorithm was
resolved (store.py draws the seed after `plan_algorithms` succeeded), so nothing a
submitter chooses can pick the variant its algorithm will be tested on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from mlbench_master import run_rules
from mlbench_master.run_rules.errors import Errors
from mlbench_master.runs.series import Planned, resolve_series
from mlbench_worker.shared import study_suite

MAX_ALGORITHMS = 12
ALGORITHM_KEYS = ("algorithm", "options", "algorithm_source")
# Which study field a refused run field belongs to (anything else: the workload's).
_OWNER = {
    "algorithm": "algorithms",
    "algorithm_options": "algorithms",
    "algorithm_source": "algorithms",
    "max_bandwidth": "conditions",
    "latency": "conditions",
    "num_workers": "num_workers",
    "workers": "num_workers",
    "num_cpus": "num_cpus",
    "seeds": "seeds",
}


@dataclass(frozen=True)
class Cell:
    """One cell to store: which algorithm (its index in the study's list), workload and
    condition, whether it is the workload's held-out variant, and its resolved series."""

    algorithm: int
    workload: str
    condition: str
    variant: bool
    series: Planned


@dataclass
class StudyPlan:
    """A checked request: what the Study row records, and its cells."""

    name: str
    algorithms: list[dict[str, Any]]  # {"label", "algorithm", "options", "source"}
    workloads: list[str]
    conditions: list[str]
    seeds: list[int]
    num_workers: int
    num_cpus: float
    held_out: bool
    reuse: bool
    cells: list[Cell] = field(default_factory=list)

    @property
    def runs(self) -> int:
        per_algorithm = len(self.workloads) * (
            len(self.conditions) * len(self.seeds) + (1 if self.held_out else 0)
        )
        return len(self.algorithms) * per_algorithm


def refused(errors: Errors) -> run_rules.RunRefused:
    return run_rules.RunRefused(dict(errors))


def parse(request: dict[str, Any]) -> StudyPlan:
    """The request's own fields checked (RunRefused naming each bad one); no run rule yet."""
    errors = Errors()
    name = request.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        errors.add("name", "give the study a name of 1 to 200 characters")
    algorithms = _algorithms(request.get("algorithms"), errors)
    workloads = conditions = []
    try:
        found_w, found_c = study_suite.check_choices(
            request.get("workloads"), request.get("conditions")
        )
        workloads, conditions = [w.name for w in found_w], [c.name for c in found_c]
    except study_suite.UnknownChoice as exc:
        errors.add("conditions" if "condition" in str(exc) else "workloads", str(exc))
    seeds = request.get("seeds") or [1]
    if not isinstance(seeds, list) or not all(_whole(s) for s in seeds):
        errors.add("seeds", "seeds must be a list of whole numbers, e.g. [1, 2, 3]")
    elif len(set(seeds)) != len(seeds):
        errors.add("seeds", "give each seed once: the same seed gives the same run")
    elif bad := [s for s in seeds if not 0 <= s < study_suite.VARIANT_SEED_FLOOR]:
        errors.add("seeds", f"seed {bad[0]} is not between 0 and "
                   f"{study_suite.VARIANT_SEED_FLOOR - 1} (held-out variants draw theirs above)")  # fmt: skip
    workers = request.get("num_workers", 2)
    if not _whole(workers) or workers < 2:
        errors.add("num_workers", "a study compares how workers combine their work: give 2 "
                   "or more")  # fmt: skip
    cpus = request.get("num_cpus")
    if cpus is not None and (isinstance(cpus, bool) or not isinstance(cpus, int | float)):
        errors.add("num_cpus", f"num_cpus must be a number, not {cpus!r}")
    for flag in ("held_out", "reuse"):
        if not isinstance(request.get(flag, True), bool):
            errors.add(flag, f"{flag} must be true or false")
    if errors:
        raise refused(errors)
    plan = StudyPlan(
        name=name.strip(), algorithms=algorithms, workloads=workloads, conditions=conditions,
        seeds=list(seeds), num_workers=int(workers),
        num_cpus=float(cpus) if cpus is not None else run_rules.default_cpus(int(workers)),
        held_out=request.get("held_out", True), reuse=request.get("reuse", True),
    )  # fmt: skip
    most = int(settings.MLBENCH_STUDY_MAX_RUNS)
    if plan.runs > most:
        errors.add("runs", f"{len(algorithms)} algorithms x {len(workloads)} workloads x "
                   f"({len(conditions)} conditions x {len(seeds)} seeds"
                   f"{' + 1 held-out variant' if plan.held_out else ''}) make {plan.runs} "
                   f"runs, more than the {most} this master allows a study "
                   "(MLBENCH_STUDY_MAX_RUNS); give fewer")  # fmt: skip
        raise refused(errors)
    return plan


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _algorithms(given: Any, errors: Errors) -> list[dict[str, Any]]:
    """Each entry as {"algorithm", "options", "source"}: a name, or an object of
    ALGORITHM_KEYS (an uploaded file by its `algorithm_source`)."""
    if not isinstance(given, list) or not given:
        errors.add("algorithms", 'list the algorithms to compare, e.g. ["allreduce", '
                   '{"algorithm": "powersgd", "options": {"rank": 2}}]')  # fmt: skip
        return []
    if len(given) > MAX_ALGORITHMS:
        errors.add("algorithms", f"at most {MAX_ALGORITHMS} algorithms a study")
    found = []
    for i, entry in enumerate(given):
        entry = {"algorithm": entry} if isinstance(entry, str) else entry
        if not isinstance(entry, dict) or set(entry) - set(ALGORITHM_KEYS):
            errors.add("algorithms", f"algorithms[{i}]: a name, or an object with "
                       f"{', '.join(ALGORITHM_KEYS)}; got {str(entry)[:60]}")  # fmt: skip
            continue
        options = entry.get("options") or {}
        if not isinstance(options, dict):
            errors.add("algorithms", f"algorithms[{i}]: options must be an object")
            continue
        found.append({"algorithm": entry.get("algorithm") or "",
                      "options": options, "source": entry.get("algorithm_source") or ""})  # fmt: skip
    return found


def _series_request(plan: StudyPlan, spec: dict[str, Any], fields: dict[str, Any],
                    condition: str, seeds: list[int], title: str,
                    errors: Errors) -> dict[str, Any] | None:  # fmt: skip
    """One cell's series request; None with the refusal under `conditions` when this master
    cannot make the condition (a rate above its MLBENCH_MAX_BANDWIDTH)."""
    try:
        rate = study_suite.CONDITIONS[condition].run_fields(int(settings.MLBENCH_MAX_BANDWIDTH))
    except study_suite.UnknownChoice as exc:
        if str(exc) not in errors.get("conditions", []):
            errors.add("conditions", str(exc))
        return None
    request = {
        **fields, **rate, "name": f"{plan.name}: {title}", "seeds": seeds,
        "workers": [plan.num_workers], "num_cpus": plan.num_cpus,
        "algorithm_options": spec["options"],
    }  # fmt: skip
    if spec["algorithm"]:
        request["algorithm"] = spec["algorithm"]
    if spec["source"]:
        request["algorithm_source"] = spec["source"]
    return request


def _resolved(request: dict[str, Any], user: Any, where: dict[str, str],
              errors: Errors) -> Planned | None:  # fmt: skip
    """The series of one cell, or None with its refusal filed under the study's field it
    belongs to, prefixed by that field's value in this cell (`where`: "algorithms",
    "workloads", "conditions" -> the cell's), so a refusal shared by many cells reads once."""
    try:
        return resolve_series(request, user)
    except run_rules.RunRefused as exc:
        for name, messages in exc.errors.items():
            owner = _OWNER.get(name, "workloads")
            for message in messages:
                text = f"{where[owner]}: {message}" if owner in where else message
                if text not in errors.get(owner, []):
                    errors.add(owner, text)
        return None


def label(resolved: dict[str, Any]) -> str:
    """How a study names an algorithm: its name, its options completed by their defaults,
    and an uploaded file's short hash, e.g. "powersgd (rank 2, warm_start True)"."""
    options = resolved.get("algorithm_options") or {}
    text = resolved.get("algorithm") or "allreduce"
    if options:
        text += " (" + ", ".join(f"{k} {options[k]}" for k in sorted(options)) + ")"
    source = resolved.get("algorithm_source") or ""
    return text + (f" [uploaded {source[:12]}]" if source else "")


def plan_cells(plan: StudyPlan, user: Any) -> None:
    """Resolve every base cell (algorithms x workloads x conditions) into plan.cells and
    label the algorithms; RunRefused with every refusal named under the study's fields.
    Labels must differ: the same algorithm with the same options twice is one algorithm."""
    errors = Errors()
    for i, spec in enumerate(plan.algorithms):
        for workload in plan.workloads:
            fields = study_suite.WORKLOADS[workload].run_fields()
            for condition in plan.conditions:
                name = spec["algorithm"] or spec["source"][:12] or "allreduce"
                title = f"{name} on {workload} at {condition}"
                request = _series_request(plan, spec, fields, condition, plan.seeds, title, errors)
                if request is None:
                    continue
                where = {"algorithms": name, "workloads": workload, "conditions": condition}
                series = _resolved(request, user, where, errors)
                if series is not None:
                    plan.cells.append(Cell(i, workload, condition, False, series))
                    spec["label"] = label(series.members[0])
    if errors:
        raise refused(errors)
    labels = [spec["label"] for spec in plan.algorithms]
    if twice := sorted({t for t in labels if labels.count(t) > 1}):
        errors.add("algorithms", f"{', '.join(twice)} listed twice (the same algorithm with the "
                   "same options): list each once")  # fmt: skip
        raise refused(errors)
    for spec, cell in ((plan.algorithms[c.algorithm], c) for c in plan.cells):
        spec["options"] = cell.series.members[0]["algorithm_options"]  # completed
        spec["algorithm"] = cell.series.members[0]["algorithm"]


def plan_variants(plan: StudyPlan, variant_seed: int, user: Any) -> dict[str, dict[str, Any]]:
    """The held-out cells, one run per algorithm and workload under HELD_OUT_CONDITION,
    drawn from `variant_seed` (recorded); the variants as the study records them."""
    errors = Errors()
    variants = {}
    for workload in plan.workloads:
        variant = study_suite.draw_variant(workload, variant_seed)
        variants[workload] = {
            "seed": variant.seed, "task": variant.task, "data_seed": variant.data_seed,
            "batch_size": variant.batch_size, "time_budget": variant.time_budget,
        }  # fmt: skip
        fields = {k: v for k, v in variant.run_fields().items() if k != "seed"}
        for i, spec in enumerate(plan.algorithms):
            condition = study_suite.HELD_OUT_CONDITION
            title = f"{spec['label']} on {workload}'s held-out variant"
            seeds = [variant.data_seed]
            request = _series_request(plan, spec, fields, condition, seeds, title, errors)
            if request is None:
                continue
            where = {"algorithms": spec["label"], "workloads": f"{workload}'s held-out variant",
                     "conditions": f"{condition} (where held-out variants run)"}  # fmt: skip
            series = _resolved(request, user, where, errors)
            if series is not None:
                plan.cells.append(Cell(i, workload, condition, True, series))
    if errors:
        raise refused(errors)
    return variants
