"""The processes of a master, one function each: web, rqworker, collector, reconcile,
stop-runs.

Why a module of its own: the same entry points serve the embedded master (its supervisor
starts `python -m mlbench_master web|rqworker|collector`) and the containers of the master
pod (scripts/k8s/master-entrypoint.sh starts `rqworker`, `collector` and `reconcile`; its
web server is gunicorn, set up like `serve_web` in scripts/k8s/master_wsgi.py; the chart's
preStop hook runs `stop-runs` when the pod ends).

Django is set up once per process, by `ready()`, which each entry point calls first; the
master's modules then import its tables at their top. That is why the imports in this
module's functions come after `ready()`: this module is loaded before Django is set up.
"""

from __future__ import annotations

import os
import uuid

import django
from django.apps import apps
from django.conf import settings
from django.core.management import call_command
from waitress import serve
from whitenoise import WhiteNoise


def ready() -> None:
    """Set Django up for this process, once (a second call does nothing)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mlbench_master.settings")
    if not apps.ready:
        django.setup()


def serve_web(port: int, threads: int = 8, host: str = "127.0.0.1") -> None:
    """waitress (127.0.0.1 unless told) with WhiteNoise serving the collected static files."""
    ready()  # what follows imports the tables
    from mlbench_master.wsgi import application

    app = WhiteNoise(application, root=str(settings.STATIC_ROOT), prefix=settings.STATIC_URL)
    serve(app, host=host, port=port, threads=threads, ident="mlbench")


def worker_name(queues: list[str]) -> str:
    """`mlbench-runs-<pid>-<6 hex>`: readable in `rqinfo` and on the queue statistics page.

    The random part matters in a container, where the worker is often pid 1 every time: a
    worker killed without saying goodbye stays registered for minutes, and RQ refuses to
    start another under the same name.
    """
    return f"mlbench-{'-'.join(queues)}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def rq_worker(queues: list[str]) -> None:
    """django-rq's `rqworker` command on `queues` (settings.RQ_QUEUES), logging at INFO."""
    ready()

    call_command("rqworker", *queues, name=worker_name(queues))


def collector(interval: float) -> None:
    """Record the workers' resource use every `interval` seconds (and reconcile runs)."""
    ready()  # what follows imports the tables
    from mlbench_master.runs.collector import collector_loop

    collector_loop(interval)


def reconcile() -> None:
    """Settle the runs a previous master left active; print a line per run handled."""
    ready()  # what follows imports the tables
    from mlbench_master.runs.reconcile import reconcile as reconcile_runs

    for note in reconcile_runs():
        print(note)


def stop_runs() -> int:
    """Stop the runs in progress as the master stops (a master pod's preStop hook): marked
    FAILED where the database answers, every launch stopped by the driver either way; a
    line per thing done or not recorded. 1 when something could not be stopped."""
    ready()  # what follows imports the tables
    from mlbench_master.runs.stopping import stop_runs as stop

    report = stop()
    for line in report.lines() or ["no run was in progress"]:
        print(line, flush=True)
    return 1 if report.problems else 0
