"""The training algorithms: how ranks combine their work, one module each.

Each module follows one paper (named, with its equations, at its top) and implements the
interface of interface.py (`Exchange`), which the Trainer calls where it summed gradients
before: `begin` before backward, `finish` after it, `after_step` after the optimizer's step,
`evaluation` around evaluations, and `comm_bytes`, the bytes the step sent. Which
algorithms exist, their options, defaults and bounds are shared/algorithm_catalogue.py's
(the master reads it too); `make` builds one for a trainer, and training/build.py's
exchange_gradients is the one place a run's algorithm is chosen.

Modules are imported by name when a run asks for them, so a run of the default all-reduce
loads none of the others. Built-in and outside algorithms (an installed module, an uploaded
file) load through one registry (registry.py); an outside one may import public.py only.
"""

from __future__ import annotations

from typing import Any

from mlbench_worker.algorithms import registry
from mlbench_worker.algorithms.interface import Exchange, Parts


def make(
    name: str | registry.Loaded, parts: Parts, options: dict[str, Any], **allreduce: Any
) -> Exchange:
    """Algorithm `name` (a built-in's name, or what registry.load returned for any) with
    checked, complete `options` (algorithm_catalogue.check's, or the module's declaration's).

    `allreduce`: the all-reduce's own settings (overlap, bucket size, the previous exchange
    to take off the parameters, ...): allreduce_exchange.choose's keywords, for `allreduce` only."""
    loaded = name if isinstance(name, registry.Loaded) else registry.load(name)
    if loaded.builtin and loaded.name == "allreduce":
        return loaded.module.build(parts, options, **allreduce)
    previous = allreduce.get("previous")
    if previous is not None:
        previous.remove()
    return registry.build(loaded, parts, options)
