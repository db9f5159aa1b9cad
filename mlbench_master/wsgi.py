"""WSGI entry point (gunicorn in images, waitress in the embedded launcher).

The URLconf, and with it every view module, is imported here, when a server process
starts, rather than by the first request it serves: Django imports it lazily, and its
imports (SciPy through the MLPerf checker, Matplotlib, the API schema) took 2.8 s here,
which the first request to each of gunicorn's workers waited for.

Everything loaded by then lives as long as the process, so it is then moved out of the
garbage collector's sight (`gc.freeze`): otherwise every full collection walks it again,
and a 1,000-point metric post, which makes thousands of short-lived objects, sets off
collections often. Measured on those posts in one process: 1.0 to 2.6 ms of CPU a batch
less, of 24 to 26 (docs/results.rst, "Metric ingestion after the CPU was cut on both
sides").
"""

import gc
import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mlbench_master.settings")
application = get_wsgi_application()
get_resolver().url_patterns  # noqa: B018 (the import is the point)
gc.freeze()
