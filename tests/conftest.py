"""Session-wide test set-up shared by every area.

Services (PostgreSQL, Redis, the web server) are started by fixtures in tests/services.py,
on loopback and free ports, and stopped afterwards.
"""

import os

# Open MPI refuses to run as root without these; the tests run as root in CI.
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
