"""Django settings, every one from the environment (see docs/configuration.rst).

Unset, they give the embedded default: SQLite and the local cluster under MLBENCH_HOME.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from mlbench_worker.shared import catalogue
from mlbench_worker.shared.evaluation import audit_process
from mlbench_worker.shared.home import mlbench_home

BASE_DIR = Path(__file__).resolve().parent
# Unset, empty or blank: ~/.mlbench (one rule, mlbench_worker/shared/home.py).
MLBENCH_HOME = mlbench_home()


def _env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        return int(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer") from exc


def _env_int_at_least(name: str, default: int, least: int) -> int:
    value = _env_int(name, default)
    if value < least:
        raise ImproperlyConfigured(f"{name}={value} is below its least value, {least}")
    return value


def _env_float(name: str, default: float) -> float:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        return float(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={value!r} is not a number") from exc


def _env_list(name: str, default: str) -> list[str]:
    return [v.strip() for v in os.environ.get(name, default).split(",") if v.strip()]


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
ALLOWED_HOSTS = _env_list("MLBENCH_ALLOWED_HOSTS", "127.0.0.1,localhost")
CSRF_TRUSTED_ORIGINS = _env_list("MLBENCH_CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_rq",
    "mlbench_master.api",
    "mlbench_master.dashboard",
    # Only for django-rq's queue pages (/admin/rq/, staff only; mlbench_master/urls.py): they
    # are drawn in the admin's templates. SimpleAdminConfig registers no model: there is no
    # admin page to edit users, tokens or runs. Last, so its templates override none of ours.
    "django.contrib.admin.apps.SimpleAdminConfig",
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
                "mlbench_master.dashboard.context.installation",
            ]
        },
    }
]
WSGI_APPLICATION = "mlbench_master.wsgi.application"

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL") or f"sqlite:///{MLBENCH_HOME / 'mlbench.sqlite3'}",
        conn_max_age=60,
        # A kept connection is tested before a request reuses it: after the database
        # restarted, the first request of every web thread would otherwise fail with a 500
        # on the connection the restart cut (see "Faults" in docs/architecture.rst).
        conn_health_checks=True,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The embedded master writes from several processes (web, RQ job, collector): WAL lets
    # readers go on during a write, IMMEDIATE transactions and a busy timeout make writers
    # wait their turn instead of failing with "database is locked".
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "/static/"
STATIC_ROOT = Path(os.environ.get("MLBENCH_STATIC_ROOT", MLBENCH_HOME / "static"))

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
MLBENCH_CLUSTER = os.environ.get("MLBENCH_CLUSTER", "local")
# MLBENCH_CLUSTER=slurm (docs/installation.rst, "On a Slurm cluster"); empty: Slurm's or
# the driver's default. SLURM_CONF names the cluster (unset: Slurm's compiled-in default).
SLURM_CONF = os.environ.get("SLURM_CONF", "")
MLBENCH_SLURM_PARTITION = os.environ.get("MLBENCH_SLURM_PARTITION", "")  # default partition
MLBENCH_SLURM_ACCOUNT = os.environ.get("MLBENCH_SLURM_ACCOUNT", "")
MLBENCH_SLURM_QOS = os.environ.get("MLBENCH_SLURM_QOS", "")
MLBENCH_SLURM_SBATCH_OPTIONS = os.environ.get("MLBENCH_SLURM_SBATCH_OPTIONS", "")  # shell words
MLBENCH_SLURM_GRES = os.environ.get("MLBENCH_SLURM_GRES", "")  # per worker with GPUs: gpu:1
MLBENCH_SLURM_LAUNCHER = os.environ.get("MLBENCH_SLURM_LAUNCHER", "")  # mpirun | srun
MLBENCH_SLURM_MPI = os.environ.get("MLBENCH_SLURM_MPI", "")  # srun --mpi=; pmix
MLBENCH_SLURM_PYTHON = os.environ.get("MLBENCH_SLURM_PYTHON", "")  # the nodes' Python
# The Python the flink implementation's ranks run (an environment of its own: PyFlink's pins
# are not the workers'); unset: the driver's Python.
MLBENCH_FLINK_PYTHON = os.environ.get("MLBENCH_FLINK_PYTHON", "")
MLBENCH_SLURM_MPIRUN = os.environ.get("MLBENCH_SLURM_MPIRUN", "")  # the nodes' mpirun
# Unset: --leave-session-attached (Open MPI); set: these shell words instead (" ": none).
MLBENCH_SLURM_MPIRUN_OPTIONS = os.environ.get("MLBENCH_SLURM_MPIRUN_OPTIONS")
MLBENCH_SLURM_SETUP = os.environ.get("MLBENCH_SLURM_SETUP", "")  # shell run first in each job
MLBENCH_SLURM_DIR = os.environ.get("MLBENCH_SLURM_DIR", "")  # shared: MLBENCH_HOME/slurm
MLBENCH_SLURM_BIN = os.environ.get("MLBENCH_SLURM_BIN", "")  # sbatch's folder; PATH

# --- Security: safe defaults; HTTPS-only switches for deployments behind TLS --------------
# The embedded master serves plain http://127.0.0.1, so cookies are only marked Secure and
# HTTPS enforced when MLBENCH_HTTPS=true (then `manage.py check --deploy` is clean).
MLBENCH_HTTPS = _env_bool("MLBENCH_HTTPS")
SESSION_COOKIE_SECURE = MLBENCH_HTTPS
CSRF_COOKIE_SECURE = MLBENCH_HTTPS
SECURE_SSL_REDIRECT = MLBENCH_HTTPS and _env_bool("MLBENCH_SSL_REDIRECT", True)
SECURE_HSTS_SECONDS = _env_int("MLBENCH_HSTS_SECONDS", 31536000 if MLBENCH_HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = MLBENCH_HTTPS
SECURE_HSTS_PRELOAD = MLBENCH_HTTPS
if _env_bool("MLBENCH_BEHIND_PROXY"):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
# Batches of up to MLBENCH_MAX_METRICS_PER_REQUEST points fit easily.
DATA_UPLOAD_MAX_MEMORY_SIZE = _env_int("MLBENCH_MAX_REQUEST_BYTES", 32 * 1024 * 1024)

# --- Redis / RQ ---------------------------------------------------------------------------
# One queue: "runs" (one run_job per run, mlbench_master/runs/lifecycle.py). django-rq needs no
# "default" queue unless something calls django_rq.enqueue() or get_queue() without a name.
RQ_QUEUES = {
    "runs": {"URL": REDIS_URL, "DEFAULT_TIMEOUT": 7200},
}
# Enqueue at once (runs.py commits the run first), not on some later transaction commit.
RQ = {"COMMIT_MODE": "auto"}

# --- REST API -----------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "mlbench_master.api.auth.RunTokenAuthentication",
        "mlbench_master.api.auth.UserTokenAuthentication",
        "mlbench_master.api.auth.TokenBasicAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["mlbench_master.api.permissions.ReadPublicOrUser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # JSON, and the form bodies the original platform's client sends (api/bodies.py).
    # The metric ingest reads JSON with orjson first (api/parsers.py).
    "DEFAULT_PARSER_CLASSES": [
        "rest_framework.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "mlbench_master.api.errors.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    # `?format=zip` is ours (metric downloads), not DRF's renderer switch.
    "URL_FORMAT_OVERRIDE": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "mlbench master API",
    "DESCRIPTION": "Runs, worker pods, metrics and logs of the mlbench benchmark platform.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "PREPROCESSING_HOOKS": ["mlbench_master.api.schema.only_canonical_paths"],
    "COMPONENT_SPLIT_REQUEST": True,
}

# --- mlbench ------------------------------------------------------------------------------
# Anonymous clients may read runs, pods, metrics and logs (writes always need a token).
MLBENCH_PUBLIC_READ = _env_bool("MLBENCH_PUBLIC_READ")
# Limits a run is validated against (per worker for CPUs, GPUs and bandwidth).
MLBENCH_MAX_WORKERS = _env_int("MLBENCH_MAX_WORKERS", 8)
MLBENCH_MAX_CPUS = _env_float("MLBENCH_MAX_CPUS", float(os.cpu_count() or 1))
MLBENCH_MAX_BANDWIDTH = _env_int("MLBENCH_MAX_BANDWIDTH", 10000)
MLBENCH_MAX_LATENCY = _env_int("MLBENCH_MAX_LATENCY", 1000)  # ms each way on a worker's link
MLBENCH_MAX_GPUS = _env_int("MLBENCH_MAX_GPUS", 0)
MLBENCH_MAX_TIME_LIMIT = _env_int("MLBENCH_MAX_TIME_LIMIT", 7 * 24 * 3600)
MLBENCH_DEFAULT_TIME_LIMIT = _env_int("MLBENCH_DEFAULT_TIME_LIMIT", 7200)
# Most runs one series (seeds x worker counts) may queue with one request.
MLBENCH_SERIES_MAX_RUNS = _env_int("MLBENCH_SERIES_MAX_RUNS", 30)
# Most runs one algorithm study may queue (cells x seeds, and the held-out variants): the
# whole suite for 7 algorithms and one seed is 126 (docs/studies.rst).
MLBENCH_STUDY_MAX_RUNS = _env_int("MLBENCH_STUDY_MAX_RUNS", 300)
# Tasks this master offers: a subset of the catalogue (mlbench_worker/shared/catalogue.py), all of it
# by default.
MLBENCH_TASKS = _env_list("MLBENCH_TASKS", ",".join(catalogue.TASKS))
if _unknown := [t for t in MLBENCH_TASKS if t not in catalogue.TASKS]:
    raise ImproperlyConfigured(
        f"MLBENCH_TASKS names {', '.join(_unknown)}, not in the task catalogue; "
        f"known tasks: {', '.join(catalogue.TASKS)}"
    )
# Seconds an RQ run job may take beyond the run's time limit (prepare + clean-up).
MLBENCH_JOB_TIMEOUT_MARGIN = _env_int("MLBENCH_JOB_TIMEOUT_MARGIN", 900)
# Ingestion and log bounds.
MLBENCH_MAX_METRICS_PER_REQUEST = _env_int("MLBENCH_MAX_METRICS_PER_REQUEST", 10000)
MLBENCH_LOG_MAX_BYTES = _env_int("MLBENCH_LOG_MAX_BYTES", 20 * 1024 * 1024)
# One predictions file (POST /api/runs/<id>/predictions/), and the arrays it unpacks to;
# ImageNet's 50,000 validation images with their top 5 take about 2.4 MB.
MLBENCH_PREDICTIONS_MAX_BYTES = _env_int("MLBENCH_PREDICTIONS_MAX_BYTES", 64 * 1024 * 1024)
# Result bundles (docs/publishing.rst): the largest file POST /api/bundles/ takes, and the
# most its members may unpack to (a zip bomb is refused by its headers before it is read).
MLBENCH_BUNDLE_MAX_BYTES = _env_int("MLBENCH_BUNDLE_MAX_BYTES", 2 * 1024**3)
MLBENCH_BUNDLE_MAX_UNPACKED_BYTES = _env_int("MLBENCH_BUNDLE_MAX_UNPACKED_BYTES", 8 * 1024**3)
# An outside algorithm's source file (POST /api/algorithms/): one Python module, so a
# quarter of a megabyte is generous and keeps the stored files small.
MLBENCH_MAX_ALGORITHM_BYTES = _env_int("MLBENCH_MAX_ALGORITHM_BYTES", 256 * 1024)
# A run's final model (POST /api/runs/<id>/model/, ONNX); how many test examples its audit
# runs it on at most (a sample of larger sets); and the time (seconds) and address space
# (MiB) of the child process that checks it or audits it (docs/checking.rst). The defaults
# are the evaluator's own (audit_process.py), which `mlbench evaluate` uses too.
MLBENCH_MODEL_MAX_BYTES = _env_int("MLBENCH_MODEL_MAX_BYTES", 512 * 1024 * 1024)
MLBENCH_AUDIT_SAMPLE = _env_int_at_least("MLBENCH_AUDIT_SAMPLE", audit_process.SAMPLE, 1)
# Task 1b's own: a row costs a ResNet-50 on a decoded JPEG, not a ResNet-20 on 32 x 32 pixels.
MLBENCH_AUDIT_SAMPLE_IMAGENET = _env_int_at_least(
    "MLBENCH_AUDIT_SAMPLE_IMAGENET", audit_process.SAMPLE_IMAGENET, 1
)
MLBENCH_AUDIT_TIMEOUT = _env_int_at_least("MLBENCH_AUDIT_TIMEOUT", audit_process.TIMEOUT_S, 1)
# Task 3's grade of a language model's perplexity over the whole validation stream (minutes
# for WikiText-2 on one core: perplexity_audit.py); in the same bounded child process.
MLBENCH_PERPLEXITY_TIMEOUT = _env_int_at_least(
    "MLBENCH_PERPLEXITY_TIMEOUT", audit_process.PERPLEXITY_TIMEOUT_S, 1
)
# Below 256 MiB not even the child's Python and onnxruntime load.
MLBENCH_AUDIT_MEMORY_MIB = _env_int_at_least(
    "MLBENCH_AUDIT_MEMORY_MIB", audit_process.MEMORY_MIB, 256
)
# A run's worker token keeps working this long after the run ended (final metric flushes).
MLBENCH_RUN_TOKEN_GRACE = _env_int("MLBENCH_RUN_TOKEN_GRACE", 600)
# GET /api/pods/ asks the cluster driver again when the stored list is older (0: never).
MLBENCH_PODS_REFRESH_SECONDS = _env_int("MLBENCH_PODS_REFRESH_SECONDS", 10)
MLBENCH_LOCAL_WORKERS = _env_int("MLBENCH_LOCAL_WORKERS", os.cpu_count() or 1)
# auto (default): each local worker slot is a host of its own (a network namespace with
# shaped links) when the master may create them; namespaces: required; off: every rank on
# this machine's own network (cluster/local/slots.py).
MLBENCH_LOCAL_NETWORK = os.environ.get("MLBENCH_LOCAL_NETWORK", "auto")
MLBENCH_MASTER_URL = os.environ.get("MLBENCH_MASTER_URL", "http://127.0.0.1:8000")
MLBENCH_DATA_DIR = Path(os.environ.get("MLBENCH_DATA_DIR", MLBENCH_HOME / "datasets"))
# Kubernetes driver: no defaults on purpose (never "default"): the chart sets both, and the
# driver says which one is missing (mlbench_master/cluster/kubernetes/driver.py).
MLBENCH_K8S_NAMESPACE = os.environ.get("MLBENCH_K8S_NAMESPACE", "")
MLBENCH_RELEASE_NAME = os.environ.get("MLBENCH_RELEASE_NAME", "")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("MLBENCH_LOG_LEVEL", "INFO")},
    "loggers": {"django.server": {"level": "WARNING"}},
}

# --- Dashboard ----------------------------------------------------------------------------
LOGIN_URL = "dashboard:login"
LOGIN_REDIRECT_URL = "dashboard:workers"
LOGOUT_REDIRECT_URL = "dashboard:login"
# Browser libraries come from npm (package-lock.json, `npm ci` in `make install`) and are
# served as static files under /static/vendor/: no CDN at run time. MLBENCH_NODE_MODULES
# points elsewhere when the image keeps them outside the source tree.
NODE_MODULES = Path(os.environ.get("MLBENCH_NODE_MODULES", BASE_DIR.parent / "node_modules"))
STATICFILES_DIRS = [
    (f"vendor/{name}", NODE_MODULES / name / "dist")
    for name in ("uplot",)
    if (NODE_MODULES / name / "dist").is_dir()
]
