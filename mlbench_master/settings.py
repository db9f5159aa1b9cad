"""Django settings, every one from the environment (see docs/configuration.rst).

Unset, they give the embedded default: SQLite and the local cluster under MLBENCH_HOME.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent
MLBENCH_HOME = Path(os.environ.get("MLBENCH_HOME", Path.home() / ".mlbench")).expanduser()


def _env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def _secret_key() -> str:
    """MLBENCH_SECRET_KEY, or one generated on first start and kept under MLBENCH_HOME."""
    key = os.environ.get("MLBENCH_SECRET_KEY")
    if key:
        return key
    path = MLBENCH_HOME / "secret_key"
    if not path.exists():
        MLBENCH_HOME.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_urlsafe(50))
    return path.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = _env_bool("MLBENCH_DEBUG")
ALLOWED_HOSTS = [
    h.strip()
    for h in os.environ.get("MLBENCH_ALLOWED_HOSTS", "127.0.0.1,localhost").split(",")
    if h.strip()
]

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
ROOT_URLCONF = "mlbench_master.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
WSGI_APPLICATION = "mlbench_master.wsgi.application"

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL") or f"sqlite:///{MLBENCH_HOME / 'mlbench.sqlite3'}",
        conn_max_age=60,
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "/static/"
STATIC_ROOT = Path(os.environ.get("MLBENCH_STATIC_ROOT", MLBENCH_HOME / "static"))

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
MLBENCH_CLUSTER = os.environ.get("MLBENCH_CLUSTER", "local")
