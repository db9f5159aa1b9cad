"""WSGI entry point (gunicorn in images, waitress in the embedded launcher).

The URLconf, and with it every view module, is imported here, when a server process
starts, rather than by the first request it serves: Django imports it lazily, and its
imports (SciPy through the MLPerf checker, Matplotlib, the API schema) took 2.8 s here,
which the first request to each of gunicorn's workers waited for.
"""

import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mlbench_master.settings")
application = get_wsgi_application()
get_resolver().url_patterns  # noqa: B018 (the import is the point)
