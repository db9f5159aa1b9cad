"""The collector: the workers' resource use as pod metrics, and a periodic reconciliation.

One loop process of the master (`python -m mlbench_master collector`). Every few seconds it
syncs the stored worker pods from the driver and stores one reading of every worker; it is
here, not in a driver, that readings learn which run they belong to (the active run is
passed to the driver), and they are stored by `metrics_store.store`, the one writer of
metric points. Every RECONCILE_SECONDS it also reconciles active runs.

Neither a database nor a Redis outage ends the loop: a failed round is logged (one line
when the database is unreachable) and the next round, on a fresh connection, goes on.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

from django.db import InterfaceError, OperationalError, close_old_connections

from mlbench_master.cluster import drivers
from mlbench_master.runs import lifecycle, metrics_store
from mlbench_master.runs.pods import sync_pods
from mlbench_master.runs.reconcile import JOB_DIED, RECONCILE_SECONDS, reconcile

log = logging.getLogger(__name__)


def collect_pod_metrics() -> int:
    """One reading of every worker in use (CPU cores, memory, network) + the Pod rows.

    Returns the points stored.
    """

    driver = drivers.get_driver()
    sync_pods(driver.pods())
    active = lifecycle.active_run()
    samples = driver.samples(lifecycle.run_spec(active) if active is not None else None)
    points = [
        metrics_store.Point(
            None, s.pod_name, s.name, float(s.value), s.date, s.cumulative, s.metadata, None
        )
        for s in samples
        if math.isfinite(s.value)  # no number: not stored, and the round goes on
    ]
    metrics_store.store(points)
    return len(points)


def collector_loop(
    interval: float = 5.0,
    stop: Callable[[], bool] | None = None,
    reconcile_every: float = RECONCILE_SECONDS,
) -> None:
    """Call collect_pod_metrics every `interval` seconds until `stop()` is true.

    Every `reconcile_every` seconds it also runs `reconcile(JOB_DIED)`: when the RQ work
    horse watching a run dies (OOM killer, segfault) nothing else would ever end the run.
    While Redis does not answer, those rounds decide nothing (see reconcile.py).
    """

    next_reconcile = time.monotonic() + reconcile_every
    while stop is None or not stop():
        began = time.monotonic()
        try:
            collect_pod_metrics()
        except (OperationalError, InterfaceError) as exc:
            log.warning("collecting pod metrics failed: database unreachable (%s)", _first(exc))
            close_old_connections()  # drops the broken connection; the next round reconnects
        except Exception:  # a failed reading must not end the loop
            log.exception("collecting pod metrics failed")
            close_old_connections()
        if time.monotonic() >= next_reconcile:
            next_reconcile = time.monotonic() + reconcile_every
            try:
                for note in reconcile(JOB_DIED, min_age=reconcile_every, wait_for_redis=True):
                    log.warning("reconciled %s", note)
            except (OperationalError, InterfaceError) as exc:
                log.warning(
                    "reconciling active runs failed: database unreachable (%s)", _first(exc)
                )
                close_old_connections()
            except Exception:
                log.exception("reconciling active runs failed")
                close_old_connections()
        time.sleep(max(0.5, interval - (time.monotonic() - began)))


def _first(exc: BaseException) -> str:
    """The first line of an exception's message (database errors run over several)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
