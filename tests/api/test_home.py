"""MLBENCH_HOME for the master: one rule (mlbench_worker/shared/home.py, shared with the client and
the worker), the same in the settings and in the embedded launcher. Unset, empty or blank
means ~/.mlbench; `~` is expanded."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlbench_master.embedded.state import home as launcher_home
from mlbench_worker.shared.home import mlbench_home

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake_user_home(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("value", [None, "", " ", "\t \n"])
def test_unset_or_blank_means_dot_mlbench_in_the_user_home(monkeypatch, fake_user_home, value):
    if value is None:
        monkeypatch.delenv("MLBENCH_HOME", raising=False)
    else:
        monkeypatch.setenv("MLBENCH_HOME", value)
    assert mlbench_home() == fake_user_home / ".mlbench"
    assert launcher_home() == mlbench_home()


def test_a_value_is_used_with_tilde_expanded(monkeypatch, fake_user_home, tmp_path):
    monkeypatch.setenv("MLBENCH_HOME", "~/state/mlbench")
    assert mlbench_home() == fake_user_home / "state" / "mlbench"
    monkeypatch.setenv("MLBENCH_HOME", str(tmp_path / "elsewhere"))
    assert mlbench_home() == tmp_path / "elsewhere"
    assert launcher_home() == tmp_path / "elsewhere"


def test_importable_without_django_configured():
    code = (
        "import sys; from mlbench_worker.shared.home import mlbench_home; print(mlbench_home()); "
        "print('django.conf' in sys.modules)"
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["MLBENCH_HOME"] = "/srv/mlbench"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["/srv/mlbench", "False"]


@pytest.mark.parametrize("value", ["", "   ", "~/x", "/srv/y"])
def test_settings_agree(tmp_path, value):
    """settings.MLBENCH_HOME and everything under it follow the same rule (a blank value
    used to make them relative to the current directory)."""
    user_home = tmp_path / "user"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "from mlbench_worker.shared.home import mlbench_home; "
        "print(s.MLBENCH_HOME); print(mlbench_home()); print(s.STATIC_ROOT); "
        "print(s.DATABASES['default']['NAME'])"
    )
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MLBENCH_") and k not in ("DATABASE_URL", "REDIS_URL")}  # fmt: skip
    env.update(
        {
            "HOME": str(user_home),
            "MLBENCH_HOME": value,
            "MLBENCH_SECRET_KEY": "test-only",
            "DJANGO_SETTINGS_MODULE": "mlbench_master.settings",
            "PYTHONPATH": str(ROOT),
        }
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    expected = {"": user_home / ".mlbench", "   ": user_home / ".mlbench",
                "~/x": user_home / "x", "/srv/y": Path("/srv/y")}[value]  # fmt: skip
    home, rule, static, database = r.stdout.split()
    assert Path(home) == Path(rule) == expected
    assert Path(static) == expected / "static"
    assert Path(database) == expected / "mlbench.sqlite3"
