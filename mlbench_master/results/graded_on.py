"""How many test examples a result was graded on, for the board (docs/publishing.rst, "The
results board"): results rank only beside results graded on the same number, and every
entry says it.

Where the number comes from, most trusted first:
- the evaluator's grades: each `evaluated_<metric>` point records the `examples` it
  counted (grading.py); for an imported run this master re-graded and agrees with, its own
  re-grade's count (bundles/regrade.py);
- task 3: the perplexity audit's grade counts the validation `tokens` it scored
  (perplexity_audit.py, the record model_files.py keeps);
- otherwise what the run was created to be graded on: its `test_examples`, or, where that
  is null, the task's whole test set of the data set it used (shared/test_sizes.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from mlbench_master.api.models import Metric, Run
from mlbench_master.grading import model_files
from mlbench_master.run_rules import test_set as test_set_rules
from mlbench_worker.shared import catalogue, test_sizes
from mlbench_worker.shared.evaluation import GRADED_PREFIX, test_sets

GRADED, AUDITED, DECLARED = "graded", "audited", "declared"


@dataclass(frozen=True)
class Size:
    """The numbers of examples a run's grades count (one, unless its grades disagree),
    the whole test set's size (None: not known), and where the count was read."""

    counts: tuple[int, ...]
    whole: int | None
    source: str
    unit: str = "examples"


def of_runs(runs: Iterable[Run], here: dict[int, dict[int, int]]) -> dict[int, Size]:
    """Each run's Size (one query for all). `here`: run id -> step -> the examples this
    master's re-grade counted, for imported runs whose re-grade agrees (those are used)."""
    runs = list(runs)
    graded: dict[int, set[int]] = defaultdict(set)
    rows = Metric.objects.filter(
        run_id__in=[r.pk for r in runs], name__startswith=GRADED_PREFIX
    ).values_list("run_id", "metadata")
    for run_id, meta in rows:
        examples = meta.get("examples") if isinstance(meta, dict) else None
        if isinstance(examples, int) and not isinstance(examples, bool) and examples > 0:
            graded[run_id].add(examples)
    return {r.pk: _size(r, here.get(r.pk) or {}, graded.get(r.pk, set())) for r in runs}


def _size(run: Run, here: dict[int, int], graded: set[int]) -> Size:
    info = catalogue.TASKS.get(run.task)
    whole = _whole(run, info)
    unit = test_set_rules.unit(info) if info is not None else "examples"
    if here:
        return Size(tuple(sorted(set(here.values()))), whole, GRADED, unit)
    if graded:
        return Size(tuple(sorted(graded)), whole, GRADED, unit)
    if test_sets.grades_the_model(run.task):
        tokens = _audited_tokens(run.pk)
        if tokens:
            return Size((tokens,), whole, AUDITED, unit)
    declared = run.test_examples or whole
    return Size((declared,) if declared else (), whole, DECLARED, unit)


def _whole(run: Run, info: catalogue.TaskInfo | None) -> int | None:
    dataset = run.dataset_used or (run.dataset if run.dataset != "auto" else "")
    if info is None or not dataset or info.dataset not in test_sizes.WHOLE:
        return None
    return test_sizes.whole(info.dataset, dataset)


def _audited_tokens(run_id: int) -> int | None:
    record: dict[str, Any] = model_files.audit_of(run_id) or {}
    graded = record.get("graded")
    tokens = graded.get("tokens") if isinstance(graded, dict) else None
    return tokens if isinstance(tokens, int) and tokens > 0 else None


def label(examples: int | None, whole: int | None, unit: str = "examples") -> str:
    """ "graded on the whole test set (10,000 examples)", "graded on 2,000 of 100,000
    examples": how the board says it."""
    if examples is None:
        return "graded on a number of examples not recorded"
    if whole is None:
        return f"graded on {examples:,} {unit}"
    if examples == whole:
        return f"graded on the whole test set ({whole:,} {unit})"
    return f"graded on {examples:,} of {whole:,} {unit}"


def of_entry(runs: list[Run], sizes: dict[int, Size]) -> dict[str, Any]:
    """An entry's test set: the one count its runs' grades share (else `mixed` says the
    counts, and the entry is not ranked), the whole set's size and the words."""
    counts = sorted({c for r in runs for c in sizes[r.pk].counts})
    wholes = {sizes[r.pk].whole for r in runs} - {None}
    whole = min(wholes) if wholes else None
    first = sizes[runs[0].pk]
    examples = counts[0] if counts else None
    mixed = ""
    if len(counts) > 1:
        mixed = "its grades count different numbers of examples: " + ", ".join(
            f"{c:,}" for c in counts
        )
    return {
        "test_examples": examples,
        "whole_test_set": whole,
        "graded_on": label(examples, whole, first.unit),
        "test_examples_source": first.source,
        "mixed": mixed,
    }
