"""The master image's WSGI application: Django with WhiteNoise serving the static files.

The same arrangement as the embedded launcher (mlbench_master.processes.serve_web), for
gunicorn: `gunicorn --pythonpath /opt/mlbench master_wsgi:application`. The files were
collected into STATIC_ROOT when the image was built.
"""

from __future__ import annotations

from django.conf import settings
from whitenoise import WhiteNoise

from mlbench_master.wsgi import application as django_application

application = WhiteNoise(
    django_application, root=str(settings.STATIC_ROOT), prefix=settings.STATIC_URL
)
