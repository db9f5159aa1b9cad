"""The rooms of mlbench_master, enforced (docs/architecture.rst, "The master package by room"):

- the top level holds only the Django project's own files, the process entry points, the
  run defaults (a table `api/models.py` reads, so it sits below every room) and the rooms;
- `api/` is the HTTP door: nothing outside it imports `mlbench_master.api` except its
  tables (`api.models`); the dashboard, the other door, may also use the API's
  serializers and errors, so a run started from the form passes the same checks;
- `common/` holds plain helpers (dates, a streamed zip) and imports nothing of the project;
- the rooms below the doors never import a door (`api` views, `dashboard`) or the
  embedded launcher that starts the processes;
- Django is set up once per process (`processes.ready()`), so modules import the tables at
  their top: an import inside a function is kept only with its reason in a comment (a real
  cycle, a module loaded before Django is set up, a client library loaded on demand), on
  its line or earlier in the same function;
- what runs before Django is set up (`python -m mlbench_master`'s module, the processes,
  the embedded launcher and supervisor, the stop) loads without reading Django's settings:
  the supervisor sets the environment they are read from only after it has started.

Each check runs once on the real package and once on a small package written by the test
with one violation of each kind, so a check that could never fail is caught too.
"""

from __future__ import annotations

import ast
import io
import os
import subprocess
import sys
import textwrap
import tokenize
from pathlib import Path

import grimp
import pytest

from tests.test_architecture import _where, build_graph

ROOT = Path(__file__).resolve().parent.parent

# The top level's files, each with why it belongs to no room.
TOP_FILES = {
    "__init__.py": "the package",
    "__main__.py": "`python -m mlbench_master`, the one entry of every process",
    "processes.py": "the processes a master runs (web, rqworker, collector, ...), one function each",
    "settings.py": "Django's settings, read from the environment",
    "urls.py": "Django's root routes",
    "wsgi.py": "Django's WSGI application",
    "run_defaults.py": "the defaults table api/models.py reads: below every room, no cycle",
}
ROOMS = {
    "accounts": "users and API tokens, their one writer",
    "api": "the HTTP door and the app's tables (models.py, migrations)",
    "bundles": "signed result bundles: writing, reading, importing, trust",
    "cluster": "the drivers that start workers (local mpirun, Kubernetes, Slurm)",
    "common": "plain helpers that import nothing of the project",
    "dashboard": "the HTML door",
    "embedded": "the one-command master on a laptop",
    "grading": "the evaluator's side: predictions, model audits, received files",
    "results": "what a run's records say: the board, costs, MLPerf logs",
    "run_rules": "what a run request may ask, with its defaults filled in",
    "runs": "every write a run's life makes, and the metric reads",
    "studies": "algorithm studies: their requests, their one writer, their scores",
}
DOORS = ("api", "dashboard")
# What a door other than api/ may take from it.
DASHBOARD_MAY_USE = ("models", "serializers", "errors")
BELOW_THE_DOORS = tuple(sorted(set(ROOMS) - {*DOORS, "embedded"}))


def top_level_strays(package_dir: Path) -> list[str]:
    """Files and folders at the package's top that are neither a declared file nor a room."""
    strays = []
    for path in sorted(package_dir.iterdir()):
        if path.name.startswith(".") or path.name == "__pycache__":
            continue
        if path.is_dir():
            if path.name not in ROOMS:
                strays.append(f"{path.name}/ (a room not in ROOMS)")
        elif path.suffix == ".py" and path.name not in TOP_FILES:
            strays.append(f"{path.name} (give it a room)")
    return strays


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def imports_of_api(graph: grimp.ImportGraph, master: str) -> list[str]:
    """Direct imports of `<master>.api` from outside it, past what each importer may use."""
    api = f"{master}.api"
    allowed_everywhere = (f"{api}.models", f"{api}.migrations")
    dashboard = f"{master}.dashboard"
    found = []
    for module in sorted(m for m in graph.modules if _inside(m, master)):
        if _inside(module, api) or module in (f"{master}.urls", f"{master}.settings"):
            continue  # the door itself; the project's root routes and settings name it
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if not _inside(imported, api) or imported == api:
                continue
            if any(_inside(imported, ok) for ok in allowed_everywhere):
                continue
            if _inside(module, dashboard) and any(
                _inside(imported, f"{api}.{part}") for part in DASHBOARD_MAY_USE
            ):
                continue
            found.append(_where(graph, module, imported))
    return found


def imports_of_the_project(graph: grimp.ImportGraph, master: str, room: str) -> list[str]:
    """Imports by `room` of any module of `master` outside `room` itself."""
    package = f"{master}.{room}"
    assert package in graph.modules, f"no {package} (the check would prove nothing)"
    found = []
    for module in sorted(m for m in graph.modules if _inside(m, package)):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if _inside(imported, master) and not _inside(imported, package):
                found.append(_where(graph, module, imported))
    return found


def rooms_importing_a_door(graph: grimp.ImportGraph, master: str) -> list[str]:
    """Direct imports by a room below the doors of an api view, the dashboard or embedded."""
    upper = (f"{master}.dashboard", f"{master}.embedded")
    api = f"{master}.api"
    found = []
    for room in BELOW_THE_DOORS:
        package = f"{master}.{room}"
        for module in sorted(m for m in graph.modules if _inside(m, package)):
            for imported in sorted(graph.find_modules_directly_imported_by(module)):
                door_of_api = _inside(imported, api) and not (
                    imported == api or _inside(imported, f"{api}.models")
                )
                if door_of_api or any(_inside(imported, u) for u in upper):
                    found.append(_where(graph, module, imported))
    return found


def unexplained_local_imports(package_dir: Path) -> list[str]:
    """Imports inside functions with no comment on their line nor earlier in the function."""
    found = []
    for path in sorted(package_dir.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        text = path.read_text()
        comments = {
            tok.start[0]
            for tok in tokenize.generate_tokens(io.StringIO(text).readline)
            if tok.type == tokenize.COMMENT
        }
        for function in ast.walk(ast.parse(text)):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if not isinstance(node, ast.Import | ast.ImportFrom):
                    continue
                lines = range(function.lineno, node.end_lineno + 1)
                if not comments.intersection(lines):
                    where = path.relative_to(package_dir.parent)
                    found.append(f"{where}:{node.lineno}")
    return sorted(set(found))


# Loaded before Django is set up: `mlbench_master up|down|status` and the processes.
BEFORE_SETUP = (
    "mlbench_master.__main__",
    "mlbench_master.processes",
    "mlbench_master.embedded.launcher",
    "mlbench_master.embedded.supervisor",
    "mlbench_master.embedded.shutdown",
    "mlbench_master.runs.stopping",
    "mlbench_master.runs.jobqueue",
)
_IMPORT_WITHOUT_SETTINGS = """
import importlib, sys
from django.conf import settings
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception as error:
        print(f"{name}: {type(error).__name__}")
    else:
        if settings.configured:
            print(f"{name}: read the settings")
            break
"""


def read_settings_as_they_load(modules: tuple[str, ...], path: Path) -> list[str]:
    """The modules of `modules` that read Django's settings (or fail) when loaded by a fresh
    interpreter with `path` first on its path and no DJANGO_SETTINGS_MODULE."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = os.pathsep.join([str(path), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_WITHOUT_SETTINGS, *modules],
        capture_output=True,
        text=True,
        env=env,
        cwd=path,
        check=True,
        timeout=120,
    )
    return done.stdout.splitlines()


@pytest.fixture(scope="module")
def graph():
    return build_graph("mlbench_master")


def test_the_top_level_holds_only_project_files_and_rooms():
    assert top_level_strays(ROOT / "mlbench_master") == []
    missing = [n for n in [*TOP_FILES, *ROOMS] if not (ROOT / "mlbench_master" / n).exists()]
    assert missing == [], f"declared but gone (drop them from the lists): {missing}"


def test_nothing_outside_api_imports_it_but_its_tables(graph):
    problems = imports_of_api(graph, "mlbench_master")
    assert not problems, "import the service from its room, not from api/:\n" + "\n".join(problems)


def test_common_imports_nothing_of_the_project(graph):
    assert imports_of_the_project(graph, "mlbench_master", "common") == []


def test_the_rooms_below_never_import_a_door(graph):
    problems = rooms_importing_a_door(graph, "mlbench_master")
    assert not problems, "\n".join(problems)


def test_imports_inside_functions_say_why():
    problems = unexplained_local_imports(ROOT / "mlbench_master")
    assert not problems, (
        "import at the module's top (Django is set up before the master's modules load), "
        "or say why not in a comment:\n" + "\n".join(problems)
    )


def test_what_runs_before_django_is_set_up_reads_no_setting():
    assert read_settings_as_they_load(BEFORE_SETUP, ROOT) == []


@pytest.fixture
def bad_master(tmp_path, monkeypatch):
    """A master with one violation of each rule: a stray module and room at the top, a
    room calling an API view, the dashboard using an API helper it may not, `common`
    reaching a room, and a room importing the dashboard."""
    files = {
        "badmaster/__init__.py": "",
        "badmaster/settings.py": "from badmaster.api import auth\n",
        "badmaster/helpers.py": "",
        "badmaster/misc/__init__.py": "",
        "badmaster/api/__init__.py": "",
        "badmaster/api/models.py": "",
        "badmaster/api/auth.py": "",
        "badmaster/api/views.py": "from badmaster.runs import lifecycle\n",
        "badmaster/api/serializers.py": "",
        "badmaster/api/params.py": "",
        "badmaster/runs/__init__.py": "",
        "badmaster/runs/lifecycle.py": "from badmaster.api.models import Run\n"
        "from badmaster.common import dates\n",
        "badmaster/runs/frozen.py": "from badmaster.api.params import since\n",
        "badmaster/results/__init__.py": "",
        "badmaster/results/board.py": "def f():\n    from badmaster.dashboard import views\n",
        "badmaster/dashboard/__init__.py": "",
        "badmaster/dashboard/views.py": "from badmaster.api.serializers import RunSerializer\n"
        "from badmaster.api.params import since\n",
        "badmaster/common/__init__.py": "",
        "badmaster/common/dates.py": "import datetime\nfrom badmaster.runs import lifecycle\n",
        "badmaster/runs/jobs.py": "def run():\n    from badmaster.api.models import Run\n\n\n"
        "def stop():\n    # loaded before Django is set up\n    from badmaster.runs import frozen\n\n\n"
        "def end():\n    import json  # stdlib, but why here?\n",
        "badmaster/embedded/__init__.py": "",
        "badmaster/embedded/launcher.py": "from django.conf import settings\n\n"
        "HOME = getattr(settings, 'MLBENCH_HOME', None)\n",
    }
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path / "badmaster"


def test_the_checks_find_each_kind_of_violation(bad_master):
    assert top_level_strays(bad_master) == [
        "helpers.py (give it a room)",
        "misc/ (a room not in ROOMS)",
    ]
    graph = build_graph("badmaster")
    assert imports_of_api(graph, "badmaster") == [
        "badmaster.dashboard.views:2 `from badmaster.api.params import since`",
        "badmaster.runs.frozen:1 `from badmaster.api.params import since`",
    ]
    assert imports_of_the_project(graph, "badmaster", "common") == [
        "badmaster.common.dates:2 `from badmaster.runs import lifecycle`"
    ]
    assert read_settings_as_they_load(
        ("badmaster.api.params", "badmaster.embedded.launcher"), bad_master.parent
    ) == ["badmaster.embedded.launcher: ImproperlyConfigured"]
    assert unexplained_local_imports(bad_master) == [
        "badmaster/results/board.py:2",
        "badmaster/runs/jobs.py:2",
    ]
    assert rooms_importing_a_door(graph, "badmaster") == [
        "badmaster.results.board:2 `from badmaster.dashboard import views`",
        "badmaster.runs.frozen:1 `from badmaster.api.params import since`",
    ]
