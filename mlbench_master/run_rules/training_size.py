"""A run's training set size and batch per worker, when not the task's (`train_examples`,
`batch_size`; null: the task's own).

Why a run may set them: an algorithm study (issue 45, docs/studies.rst) sizes its workloads
so a suite fits in half an hour (task 1a on 2,560 generated images) and draws held-out
variants with another batch; before these fields the master could not start such a run.
They change what is trained, never what is graded: the test set stays `test_examples`'
(test_set.py), and both are setup fields (SETUP_FIELDS), so a result says them and the
comparison rule keeps runs of other sizes apart. Only the reference worker reads them: a
measurement trains nothing and an open-division command sizes its own training, so both
refuse them by name.
"""

from __future__ import annotations

from typing import Any

from mlbench_master.run_rules.errors import Errors
from mlbench_worker.shared import catalogue

FIELDS = ("train_examples", "batch_size")
MAX_BATCH = 65_536  # per worker; far above any task's, below what would exhaust memory at once


def check_training_size(
    fields: dict[str, Any], info: catalogue.TaskInfo | None, measurement: bool,
    open_division: bool, errors: Errors,
) -> None:  # fmt: skip
    """Whole numbers in range, and only for a run of the reference worker."""
    for name in FIELDS:
        n = fields.get(name)
        if n is None:
            continue
        if measurement and info is not None:
            errors.add(name, f"task {info.name} measures communication: it trains nothing; "
                       "leave it out")  # fmt: skip
        elif open_division:
            errors.add(name, "an open-division command sizes its own training; leave it out "
                       "(or pass it in the command)")  # fmt: skip
        elif isinstance(n, bool) or not isinstance(n, int) or n < 1:
            errors.add(name, f"{name} must be a whole number of at least 1, not {n!r}")
        elif name == "batch_size" and n > MAX_BATCH:
            errors.add(name, f"batch_size must be at most {MAX_BATCH} per worker, not {n}")
        elif name == "train_examples" and n < int(fields.get("num_workers") or 1):
            errors.add(name, f"train_examples {n} gives some of the {fields['num_workers']} "
                       "workers nothing to train on; give at least one example per worker")  # fmt: skip
