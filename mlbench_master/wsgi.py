"""WSGI entry point (gunicorn in images, waitress in the embedded launcher)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mlbench_master.settings")
application = get_wsgi_application()
