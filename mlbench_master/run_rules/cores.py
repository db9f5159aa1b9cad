"""The CPUs a run gets when it leaves them out, and the warning when it asks for more
threads than its machine has cores: both from the driver's offer of cores.

Why: the local driver's ranks share one machine and are not bound to cores, and each rank
runs `threads_per_rank(num_cpus)` torch threads. Two workers of the table's 2 CPUs on a
2-core machine run 4 threads on 2 cores, and train at a fraction of the speed of two
workers of 1 CPU. So on a driver that offers its cores (the local one: `cores()`), a run
that leaves num_cpus out gets cores ÷ workers (at least 1, never more than the table's
default), and one that asks for more is accepted but says so (`oversubscription`, shown
as the run's `warnings`). A Kubernetes or Slurm worker gets CPUs of its own (a pod's
request, a node's cores): those drivers offer no cores and keep the table's default.

The one call to the driver outside `cluster_limits` (cluster.py): a default has to be
decided while the request is filled, before the driver is asked about the filled run.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from mlbench_master.cluster import drivers
from mlbench_master.cluster.mpirun import threads_per_rank


@runtime_checkable
class OffersCores(Protocol):
    """A driver whose workers all share one machine's cores (the local driver)."""

    def cores(self) -> int:
        """How many cores the workers of a run share."""
        ...


def machine_cores() -> int | None:
    """The cores the configured driver's workers share; None where it offers none (every
    worker has CPUs of its own) or cannot even be set up (the run's job says why)."""
    try:
        driver = drivers.get_driver()  # through its module: tests replace it there
    except Exception:  # noqa: BLE001 - a misconfigured master, said by the run's job
        return None
    return driver.cores() if isinstance(driver, OffersCores) else None


def fitting_cpus(num_workers: int, ceiling: float, cores: int | None) -> float:
    """The CPUs a worker of a run of `num_workers` gets without asking: `ceiling` (the
    table's default within the operator's limit), lowered to its share of `cores` (at
    least 1) where the driver offers its cores."""
    if cores is None:
        return ceiling
    return min(ceiling, float(max(1, cores // max(1, num_workers))))


def oversubscription(num_workers: int, num_cpus: float, cores: int | None) -> str | None:
    """Why a run of `num_workers` workers of `num_cpus` CPUs runs slower than it could on a
    machine of `cores` shared cores (more torch threads than cores), in words; None when it
    does not, or the driver offers no cores."""
    if cores is None or num_workers < 1:
        return None
    threads = num_workers * threads_per_rank(num_cpus)
    if threads <= cores:
        return None
    fits = (
        f"num_cpus {cores // num_workers} fits: leave num_cpus out to get it"
        if num_workers <= cores
        else f"at most {cores} workers of 1 CPU fit"
    )
    return (
        f"{num_workers} workers × {num_cpus:g} CPUs run {threads} threads on this machine's "
        f"{cores} cores: the threads take turns, and the run trains slower than one that "
        f"fits ({fits})"
    )
