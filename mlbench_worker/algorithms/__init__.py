"""The training algorithms: how ranks combine their work, one module each.

Each module follows one paper (named, with its equations, at its top) and implements the
interface of interface.py (`Exchange`), which the Trainer calls where it summed gradients
before: `begin` before backward, `finish` after it, `after_step` after the optimizer's step,
`evaluation` around evaluations, and `comm_bytes`, the bytes the step sent. Which
algorithms exist, their options, defaults and bounds are shared/algorithm_catalogue.py's
(the master reads it too); `make` builds one for a trainer, and training/build.py's
exchange_gradients is the one place a run's algorithm is chosen.

Modules are imported by name when a run asks for them, so a run of the default all-reduce
loads none of the others.
"""

from __future__ import annotations

import importlib
from typing import Any

from mlbench_worker.algorithms.interface import Exchange, Parts

MODULES = {
    "allreduce": "mlbench_worker.algorithms.allreduce",
    "powersgd": "mlbench_worker.algorithms.powersgd",
    "topk": "mlbench_worker.algorithms.topk",
    "signsgd": "mlbench_worker.algorithms.signsgd",
    "localsgd": "mlbench_worker.algorithms.localsgd",
    "decentralized": "mlbench_worker.algorithms.decentralized",
}


def make(name: str, parts: Parts, options: dict[str, Any], **allreduce: Any) -> Exchange:
    """Algorithm `name` with checked, complete `options` (algorithm_catalogue.check's).

    `allreduce`: the all-reduce's own settings (overlap, bucket size, the previous exchange
    to take off the parameters, ...): allreduce_exchange.choose's keywords, for `allreduce` only."""
    module = importlib.import_module(MODULES[name])
    if name == "allreduce":
        return module.build(parts, options, **allreduce)
    previous = allreduce.get("previous")
    if previous is not None:
        previous.remove()
    return module.build(parts, options)
