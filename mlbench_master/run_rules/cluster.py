"""What the run rules need from the cluster driver, as data (`ClusterLimits`).

Why: the rules decide a 400 from what they are given, so they can be read, and tested,
without a cluster; the driver is asked by the caller before the rules run
(`cluster_limits`, called by runs.create_run and series.create_series with the filled
request they then resolve), never by the rules.

A driver's limits are not plain numbers (a Slurm partition's nodes, the local machine's
slots, what the workers' Python can import), and its refusals are in its own words, which
name the number asked for. So the data are the driver's answers for the numbers and the
framework a request comes to once filled: the same questions the rules used to ask it,
asked once, before them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from mlbench_master.cluster import drivers
from mlbench_master.cluster.base import ClusterError
from mlbench_master.run_rules.fill import Filled
from mlbench_master.run_rules.table import limits
from mlbench_worker.shared import implementation_catalogue


@dataclass(frozen=True)
class ClusterLimits:
    """The cluster's answers to what a run asks for; empty: it refuses nothing (also what a
    master whose driver cannot even be set up gets: the run's job says why, not a 400).

    `workers` and `cpus` map a number of workers or of CPUs a worker the cluster can never
    give to its driver's reason; `modules` maps a module the workers' Python cannot import
    (an implementation's framework) to which Python was asked, as a refusal names it.
    """

    workers: Mapping[int, str] = field(default_factory=dict)
    cpus: Mapping[float, str] = field(default_factory=dict)
    modules: Mapping[str, str] = field(default_factory=dict)


def cluster_limits(run: Filled) -> ClusterLimits:
    """The configured driver's answers for a filled request (`fill`'s, which `resolve` then
    checks).

    Asked as the rules asked before (the numbers only when within the operator's limits;
    the framework only of a run that trains with an implementation its task has), so a
    request costs the driver no more than it did.
    """
    try:
        driver = drivers.get_driver()
    except Exception:  # noqa: BLE001 - a misconfigured master, said by the run's job
        return ClusterLimits()
    workers, cpus = run.fields["num_workers"], run.fields["num_cpus"]
    refused_workers: dict[int, str] = {}
    refused_cpus: dict[float, str] = {}
    if 1 <= workers <= limits()["workers"]:
        try:
            driver.check_workers(workers)
        except ClusterError as exc:
            refused_workers[workers] = str(exc)
        if cpus is not None:
            try:
                driver.check_cpus(cpus)
            except ClusterError as exc:
                refused_cpus[cpus] = str(exc)
    missing: dict[str, str] = {}
    impl = implementation_catalogue.get(run.fields["implementation"])  # "": trains none of ours
    if impl is not None and run.info is not None and impl.name in run.info.implementations:
        for requirement in impl.requirements():
            if driver.has_requirement(requirement, impl.name) is False:
                missing[requirement] = driver.modules_checked_with(driver.python_for(impl.name))
    return ClusterLimits(workers=refused_workers, cpus=refused_cpus, modules=missing)
