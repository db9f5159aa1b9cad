"""Session-wide test set-up shared by every area.

Services (PostgreSQL, Redis) are started by fixtures in tests/services.py, on loopback and
free ports, and stopped afterwards. Django's test database is created on that PostgreSQL
(never SQLite), so constraints, bulk inserts and aggregates behave as in production.

Fixtures offered here:
- `postgres_url`, `redis_url` (session): the services' URLs.
- `redis_settings`: points settings.REDIS_URL and the RQ queues at the test Redis.
- `test_database_url`: a DATABASE_URL naming Django's test database, for subprocesses
  (RQ workers, web servers) that must see the same rows (use it with `transactional_db`).
"""

import os

import pytest

from tests.services import postgres_url, redis_url  # noqa: F401  (fixtures)

# Open MPI refuses to run as root without these; the tests run as root in CI.
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix, postgres_url):  # noqa: F811
    """Make the `default` database the session's PostgreSQL before pytest-django creates it."""
    import dj_database_url
    from django.conf import settings
    from django.db import connections

    config = dj_database_url.parse(postgres_url, conn_max_age=0)
    default = settings.DATABASES["default"]
    default.clear()
    default.update(config)
    connections.configure_settings(settings.DATABASES)  # fills in Django's defaults
    # A connection object made for the SQLite default must not survive the switch.
    if hasattr(connections._connections, "default"):
        connections["default"].close()
        del connections["default"]


@pytest.fixture
def test_database_url(django_db_setup, postgres_url) -> str:  # noqa: F811
    """DATABASE_URL of Django's test database (for subprocesses of a transactional test)."""
    from django.db import connection

    base = postgres_url.rsplit("/", 1)[0]
    return f"{base}/{connection.settings_dict['NAME']}"


@pytest.fixture
def redis_settings(settings, redis_url):  # noqa: F811
    """Point settings.REDIS_URL and every RQ queue at the session's Redis; flush it after."""
    import redis

    settings.REDIS_URL = redis_url
    settings.RQ_QUEUES = {
        name: {**cfg, "URL": redis_url} for name, cfg in getattr(settings, "RQ_QUEUES", {}).items()
    } or {"runs": {"URL": redis_url}}
    yield redis_url
    redis.Redis.from_url(redis_url).flushall()
