"""Settings come from the environment; production settings pass `check --deploy`;
docs/configuration.rst lists every variable settings.py reads."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run_django(code: str, env: dict, tmp_path) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith("MLBENCH_") and k not in ("DATABASE_URL", "REDIS_URL")}  # fmt: skip
    full_env.update(
        {"MLBENCH_HOME": str(tmp_path), "DJANGO_SETTINGS_MODULE": "mlbench_master.settings"}
    )
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=full_env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip


def test_check_deploy_clean_with_production_settings(tmp_path):
    env = {
        "MLBENCH_SECRET_KEY": "x" * 20 + "a-long-random-production-key-0123456789",
        "MLBENCH_HTTPS": "true",
        "MLBENCH_ALLOWED_HOSTS": "mlbench.example.org",
        "DATABASE_URL": "postgresql://u:p@127.0.0.1:1/mlbench",
    }
    code = "import django,sys; from django.core.management import call_command; django.setup(); call_command('check', '--deploy', '--fail-level', 'WARNING')"
    r = _run_django(code, env, tmp_path)
    assert r.returncode == 0, r.stderr + r.stdout


def test_defaults_and_environment(tmp_path):
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.DEBUG, s.DATABASES['default']['ENGINE'], s.SESSION_COOKIE_SECURE, "
        "s.RQ_QUEUES['runs']['URL'], s.MLBENCH_MAX_WORKERS, s.MLBENCH_PUBLIC_READ)"
    )
    r = _run_django(code, {}, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "django.db.backends.sqlite3", "False",
                                "redis://127.0.0.1:6379/0", "8", "False"]  # fmt: skip
    key = (tmp_path / "secret_key").read_text()
    assert len(key) > 50 and oct((tmp_path / "secret_key").stat().st_mode)[-3:] == "600"
    env = {"DATABASE_URL": "postgresql://u:p@db:5432/x", "REDIS_URL": "redis://r:1/2",
           "MLBENCH_MAX_WORKERS": "3", "MLBENCH_PUBLIC_READ": "true"}  # fmt: skip
    r = _run_django(code, env, tmp_path)
    assert r.stdout.split() == ["False", "django.db.backends.postgresql", "False",
                                "redis://r:1/2", "3", "True"]  # fmt: skip
    # the key generated on first start is kept
    assert (tmp_path / "secret_key").read_text() == key


def test_bad_number_in_environment_is_named(tmp_path):
    r = _run_django("import django; django.setup()", {"MLBENCH_MAX_WORKERS": "many"}, tmp_path)
    assert r.returncode != 0 and "MLBENCH_MAX_WORKERS='many' is not an integer" in r.stderr


def test_configuration_docs_list_every_variable():
    source = (ROOT / "mlbench_master" / "settings.py").read_text()
    names = set(re.findall(r'(?:environ\.get|_env_\w+)\(\s*"([A-Z][A-Z0-9_]+)"', source))
    assert {"DATABASE_URL", "REDIS_URL", "MLBENCH_SECRET_KEY", "MLBENCH_TASKS"} <= names
    docs = (ROOT / "docs" / "configuration.rst").read_text()
    missing = sorted(n for n in names if f"``{n}``" not in docs)
    assert not missing, f"docs/configuration.rst does not describe {missing}"


def test_tasks_default_to_the_catalogue_and_unknown_ones_are_refused(tmp_path):
    from mlbench_worker.shared import catalogue

    code = "import django; django.setup(); from django.conf import settings as s; print(*s.MLBENCH_TASKS)"
    r = _run_django(code, {}, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == list(catalogue.TASKS)
    r = _run_django(code, {"MLBENCH_TASKS": "resnet20-cifar10,resnet18-mnist"}, tmp_path)
    assert r.returncode != 0
    assert "MLBENCH_TASKS names resnet18-mnist, not in the task catalogue" in r.stderr
