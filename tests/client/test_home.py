"""MLBENCH_HOME for the worker package: one rule, in mlbench_worker/shared/home.py.

Unset, empty or only whitespace means ~/.mlbench; any other value is used with ~ expanded,
made absolute against the reader's working directory.
The client, the `mlbench` command and the worker's data cache all resolve it there.
"""

import pytest

from mlbench_worker.client import api, defaults
from mlbench_worker.shared.home import mlbench_home
from mlbench_worker.training import options


@pytest.fixture
def home_dir(monkeypatch, tmp_path):
    """A fake user home, so ~ expands to a folder this test owns."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("MLBENCH_DATA_DIR", raising=False)
    return tmp_path


def test_unset_is_dot_mlbench_in_the_user_home(monkeypatch, home_dir):
    monkeypatch.delenv("MLBENCH_HOME", raising=False)
    assert mlbench_home() == home_dir / ".mlbench"


@pytest.mark.parametrize("blank", ["", " ", "\t", "  \n "])
def test_empty_or_whitespace_is_the_same_as_unset(monkeypatch, home_dir, blank):
    monkeypatch.setenv("MLBENCH_HOME", blank)
    assert mlbench_home() == home_dir / ".mlbench"


def test_tilde_is_expanded(monkeypatch, home_dir):
    monkeypatch.setenv("MLBENCH_HOME", "~/bench/state")
    assert mlbench_home() == home_dir / "bench" / "state"


def test_a_path_is_used_as_given_and_a_relative_one_made_absolute(monkeypatch, home_dir, tmp_path):
    monkeypatch.setenv("MLBENCH_HOME", str(tmp_path / "elsewhere"))
    assert mlbench_home() == tmp_path / "elsewhere"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLBENCH_HOME", "relative/home")
    # Absolute: the services and the ranks, in other folders, find the same place.
    assert mlbench_home() == tmp_path / "relative" / "home" and mlbench_home().is_absolute()


@pytest.mark.parametrize("value", [None, "", "   ", "~/h", "/srv/mlbench"])
def test_client_and_worker_options_follow_the_same_rule(monkeypatch, home_dir, value):
    if value is None:
        monkeypatch.delenv("MLBENCH_HOME", raising=False)
    else:
        monkeypatch.setenv("MLBENCH_HOME", value)
    assert defaults.mlbench_home() == mlbench_home()
    assert options.default_data_dir() == str(mlbench_home() / "datasets")


def test_client_reads_the_embedded_masters_url_and_token_there(monkeypatch, home_dir):
    monkeypatch.setenv("MLBENCH_HOME", " ")
    monkeypatch.delenv("MLBENCH_URL", raising=False)
    monkeypatch.delenv("MLBENCH_TOKEN", raising=False)
    state = home_dir / ".mlbench"
    state.mkdir()
    (state / "url").write_text("http://127.0.0.1:8123\n")
    (state / "token").write_text("abc\n")
    assert api.default_url() == "http://127.0.0.1:8123"
    assert api.default_token() == "abc"
