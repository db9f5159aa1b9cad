# Over 400 lines: the import and write rules with their planted violations, kept side by side.
"""The seams between modules, enforced: each failure names the offending import or line.

- no import cycle among the modules of mlbench_master and mlbench_worker (imports inside
  functions count: grimp reads every import statement);
- the master never imports torch, the worker never imports Django (the worker package's
  rooms, and what the master may import of it: tests/test_worker_rooms.py);
- cluster/ never imports api/ or runs (drivers are called, they do not call back);
- `Run.state` is assigned only in mlbench_master/runs/lifecycle.py;
- tests and benchmarks build no mpirun command by hand: they take it from
  mlbench_master/cluster/mpirun.py (`launcher_argv`), so they launch as runs do.

Who may write users, tokens and metric points: tests/test_write_owners.py, built alike;
what the evaluator may reach (numpy and shared/, no implementation, trainer, model or
framework): tests/test_worker_rooms.py, with the worker's other rooms.

The checks are plain functions run once on the real packages and once on a small package
written by the test with each kind of violation, so a check that could never fail is
caught too.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("mlbench_master", "mlbench_worker")
# Calls that write a model's fields from keyword arguments.
WRITING_CALLS = {"update", "create", "get_or_create", "update_or_create", "bulk_update", "save"}


def build_graph(*packages: str) -> grimp.ImportGraph:
    return grimp.build_graph(*packages, include_external_packages=True, cache_dir=None)


def _where(graph: grimp.ImportGraph, importer: str, imported: str) -> str:
    details = graph.get_import_details(importer=importer, imported=imported)
    if not details:
        return f"{importer} -> {imported}"
    first = details[0]
    return f"{importer}:{first['line_number']} `{first['line_contents']}`"


def import_cycles(graph: grimp.ImportGraph, packages: tuple[str, ...]) -> list[str]:
    """Every cycle among the packages' modules, one line each, with where each import is."""
    internal = {m for m in graph.modules if m.split(".")[0] in packages}
    found: dict[frozenset[str], str] = {}
    for importer in sorted(internal):
        for imported in sorted(graph.find_modules_directly_imported_by(importer) & internal):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back is None:
                continue
            cycle = [importer, *back]  # importer -> imported -> ... -> importer
            key = frozenset(cycle)
            if key not in found:
                steps = [_where(graph, a, b) for a, b in zip(cycle, cycle[1:], strict=False)]
                found[key] = " ; ".join(steps)
    return sorted(found.values())


def forbidden_chains(graph: grimp.ImportGraph, importers: list[str], imported: str) -> list[str]:
    """For each importer (module or package) that reaches `imported` (module or package,
    its submodules included), the shortest chain with the line of each import."""
    missing = [m for m in [*importers, imported] if m not in graph.modules]
    assert not missing, f"no such module here (the check would prove nothing): {missing}"
    problems = []
    for importer in importers:
        chains = graph.find_shortest_chains(importer=importer, imported=imported, as_packages=True)
        for chain in sorted(chains, key=lambda c: (len(c), c))[:1]:
            steps = [_where(graph, a, b) for a, b in zip(chain, chain[1:], strict=False)]
            problems.append(" ; ".join(steps))
    return problems


def direct_imports(
    graph: grimp.ImportGraph, importer: str, forbidden: tuple[str, ...]
) -> list[str]:
    """Imports by `importer` itself of a module in `forbidden` (a package counts with its
    submodules), with their lines. Direct only: a serializer may show what run_rules derives,
    and run_rules itself asks the driver."""
    assert importer in graph.modules, f"no module {importer} (the check would prove nothing)"
    found = []
    for imported in sorted(graph.find_modules_directly_imported_by(importer)):
        if any(imported == f or imported.startswith(f + ".") for f in forbidden):
            found.append(_where(graph, importer, imported))
    return found


def definitions(roots: list[Path], name: str) -> list[str]:
    """Every function or class called `name` defined under `roots`, as path:line."""
    found = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                defined = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
                if isinstance(node, defined) and node.name == name:
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return found


def _writes_state(node: ast.AST) -> bool:
    """Whether `node` may write a `state` field: `x.state = ...` (also in a tuple), a model
    write with `state=` (also as `**{"state": ...}`), or setattr with "state" or a name
    that cannot be read statically."""
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    while any(isinstance(t, (ast.Tuple, ast.List)) for t in targets):
        targets = [
            e for t in targets for e in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t])
        ]
    if any(isinstance(t, ast.Attribute) and t.attr == "state" for t in targets):
        return True
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if name == "setattr" and len(node.args) >= 2:
        key = node.args[1]
        return not isinstance(key, ast.Constant) or key.value == "state"
    if name not in WRITING_CALLS and name != "Run":
        return False
    for keyword in node.keywords:
        if keyword.arg == "state":
            return True
        if keyword.arg is None:  # **something: a dict naming "state", or unreadable
            value = keyword.value
            if not isinstance(value, ast.Dict):
                return True
            if any(isinstance(k, ast.Constant) and k.value == "state" for k in value.keys):
                return True
    return False


def state_writes(root: Path, allowed: set[Path]) -> list[str]:
    """Lines outside `allowed` files that may assign a `state` field (see _writes_state)."""
    problems = []
    for path in sorted(root.rglob("*.py")):
        if path in allowed or "migrations" in path.parts:
            continue
        text = path.read_text()
        for node in ast.walk(ast.parse(text, filename=str(path))):
            if _writes_state(node):
                line = ast.get_source_segment(text, node) or ""
                problems.append(f"{path.relative_to(root.parent)}:{node.lineno} `{line[:80]}`")
    return problems


# Files under tests/ that may spell an mpirun command by hand, and why.
MPIRUN_BY_HAND_ALLOWED = {
    "tests/cluster/test_mpirun.py": "the builder's own unit tests spell the argv they expect",
    "tests/kubernetes/test_exec_channel.py": "a command handed to an emulated pod's exec",
    "tests/test_architecture.py": "the planted violations, as text",
}
MPIRUN_PROGRAMS = {"mpirun", "mpiexec", "orterun", "prterun"}
MPIRUN_RANK_OPTIONS = {"-n", "-np", "--np", "--n", "-c"}
MPIRUN_LAUNCHER_FLAGS = {
    "--oversubscribe",
    "--bind-to",
    "--map-by",
    "plm_rsh_agent",
    "plm_ssh_no_tree_spawn",
}
_MPIRUN_IN_TEXT = re.compile(
    r"(?:^|[\s/;&|(\"'])(?:mpirun|mpiexec|orterun|prterun)\s+(?:-n|-np|--np|--n|-c)\s"
)


def _names_mpirun(node: ast.expr) -> bool:
    """Whether `node` is mpirun spelled in code: a string whose last path part is mpirun
    (or mpiexec, orterun, prterun), an f-string or `+` ending so, a name or attribute that
    says mpirun (`MPIRUN`, `helpers.MPIRUN`, `mpirun_bin`, also starred), or a call given
    such a string (`os.path.join(bindir, "mpirun")`, `shutil.which("mpirun")`)."""
    if isinstance(node, ast.Starred):
        return _names_mpirun(node.value)
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value.rsplit("/", 1)[-1] in MPIRUN_PROGRAMS
    if isinstance(node, ast.JoinedStr):
        return bool(node.values) and _names_mpirun(node.values[-1])
    if isinstance(node, ast.BinOp):
        return _names_mpirun(node.right)
    if isinstance(node, (ast.Name, ast.Attribute)):
        name = (node.id if isinstance(node, ast.Name) else node.attr).lower()
        return any(program in name for program in MPIRUN_PROGRAMS)
    if isinstance(node, ast.Call):
        return any(_names_mpirun(a) for a in node.args if isinstance(a, ast.Constant))
    return False


def _elements(node: ast.AST) -> list[ast.expr | None] | None:
    """The elements of a list or tuple literal or of a `+` of them (None stands for an
    operand that is not a literal: nothing counts as adjacent across it)."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return list(node.elts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        sides = [_elements(node.left), _elements(node.right)]
        if sides == [None, None]:
            return None
        return [e for side in sides for e in (side if side is not None else [None])]
    return None


def _text(node: ast.expr) -> str | None:
    """A string literal's text; an f-string's, with a part that names mpirun as "mpirun"."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.FormattedValue):
                parts.append("mpirun" if _names_mpirun(value.value) else "X")
            elif isinstance(value, ast.Constant):
                parts.append(str(value.value))
        return "".join(parts)
    return None


def _builds_mpirun(node: ast.AST) -> bool:
    """Whether `node` spells an mpirun command by hand (see mpirun_by_hand)."""
    elements = list(node.args) if isinstance(node, ast.Call) else _elements(node)
    if elements:
        for first, second in zip(elements, elements[1:], strict=False):
            if first is None or second is None:
                continue
            if _names_mpirun(first) and _text(second) in MPIRUN_RANK_OPTIONS:
                return True
        if isinstance(node, (ast.List, ast.Tuple)) and any(
            isinstance(e, ast.Constant) and e.value in MPIRUN_LAUNCHER_FLAGS for e in elements
        ):
            return True
    text = _text(node) if isinstance(node, (ast.Constant, ast.JoinedStr)) else None
    return text is not None and bool(_MPIRUN_IN_TEXT.search(text))


def mpirun_by_hand(root: Path, allowed: set[Path]) -> list[str]:
    """Lines of the .py files under `root` (outside `allowed`) that build an mpirun command
    by hand instead of taking it from mlbench_master/cluster/mpirun.py (`launcher_argv`, then
    the test's own program; or `mpirun_argv` / `driver_argv` for a run).

    Caught: (1) a list or tuple literal, a `+` of them, or a call's positional arguments,
    in which mpirun (a string "mpirun", "/path/mpirun", an f-string ending so, a name like
    MPIRUN or helpers.MPIRUN, `os.path.join(..., "mpirun")`; mpiexec, orterun and prterun
    alike) is followed by a rank count option (-n, -np, --np, --n, -c); (2) a list or tuple
    literal holding one of the launcher's own flags (--oversubscribe, --bind-to, --map-by,
    plm_rsh_agent, plm_ssh_no_tree_spawn), which belong in an argument of the builder;
    (3) a string or f-string (docstrings and other bare string statements excepted) saying
    `mpirun -n ...` (e.g. for `sh -c` or shlex.split). Not caught: a command whose program
    is a name that does not say mpirun and that uses none of the launcher's flags, e.g.
    `["no-such-mpirun", "-n", "1"]`, a stand-in handed to an emulated pod."""
    problems = []
    for path in sorted(root.rglob("*.py")):
        if path in allowed:
            continue
        text = path.read_text()
        tree = ast.parse(text, filename=str(path))
        bare = {  # docstrings and other string statements: prose, not commands
            id(n.value)
            for n in ast.walk(tree)
            if isinstance(n, ast.Expr) and isinstance(n.value, (ast.Constant, ast.JoinedStr))
        }
        lines: dict[int, str] = {}
        for node in ast.walk(tree):
            if id(node) in bare or getattr(node, "lineno", None) in lines:
                continue
            if _builds_mpirun(node):
                segment = " ".join((ast.get_source_segment(text, node) or "").split())[:80]
                lines[node.lineno] = f"{path.relative_to(root.parent)}:{node.lineno} `{segment}`"
        problems += [lines[n] for n in sorted(lines)]
    return problems


# --------------------------------------------------------------------------- the real code


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return build_graph(*PACKAGES)


def test_no_import_cycle(graph):
    cycles = import_cycles(graph, PACKAGES)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_master_never_imports_torch(graph):
    chains = forbidden_chains(graph, ["mlbench_master"], "torch")
    assert not chains, "the master reaches torch:\n" + "\n".join(chains)


def test_the_worker_never_imports_django(graph):
    chains = forbidden_chains(graph, ["mlbench_worker"], "django")
    assert not chains, "the worker reaches Django:\n" + "\n".join(chains)


@pytest.mark.parametrize(
    "framework, implementation",
    [("tensorflow", "tensorflow"), ("pyspark", "spark"), ("pyflink", "flink")],
)
def test_only_its_implementation_imports_a_framework(graph, framework, implementation):
    # The worker's entry point hands a tensorflow (spark, flink) run to
    # implementations.tensorflow (.spark, .flink); the master, the client, the CLI, the tasks,
    # the torch loop and the other implementations never load TensorFlow (pyspark, pyflink).
    implementations = "mlbench_worker.implementations"
    rooms = graph.find_children("mlbench_worker") - {"mlbench_worker.__main__", implementations}
    others = graph.find_children(implementations) - {f"{implementations}.{implementation}"}
    importers = sorted({"mlbench_master"} | rooms | others)
    assert "mlbench_worker.training" in importers and "mlbench_worker.client" in importers
    chains = forbidden_chains(graph, importers, framework)
    assert not chains, f"{framework} is reached outside its implementation:\n" + "\n".join(chains)


@pytest.mark.parametrize("forbidden", ["mlbench_master.api", "mlbench_master.runs"])
def test_cluster_never_imports_api_or_runs(graph, forbidden):
    chains = forbidden_chains(graph, ["mlbench_master.cluster"], forbidden)
    assert not chains, f"cluster/ reaches {forbidden}:\n" + "\n".join(chains)


# The run lifecycle, its job and the drivers: what parsing a request must not reach into.
LIFECYCLE_AND_DRIVERS = (
    "mlbench_master.runs.lifecycle",
    "mlbench_master.runs.jobs",
    "mlbench_master.runs.reconcile",
    "mlbench_master.cluster",
)


def test_serializers_import_no_lifecycle_or_driver_module(graph):
    """Serializers parse and shape; the rules (run_rules) and the lifecycle (runs) decide."""
    problems = direct_imports(graph, "mlbench_master.api.serializers", LIFECYCLE_AND_DRIVERS)
    assert not problems, "serializers reach the lifecycle or a driver:\n" + "\n".join(problems)


def test_one_mlbench_home_for_master_client_and_worker():
    """MLBENCH_HOME's rule (unset or blank: ~/.mlbench) is written once: two copies drift."""
    found = definitions([ROOT / p for p in PACKAGES], "mlbench_home")
    assert len(found) == 1 and found[0].startswith("mlbench_worker/shared/home.py:"), (
        f"mlbench_home defined {len(found)} times: {found}"
    )


def test_run_state_is_assigned_only_in_runs():
    master = ROOT / "mlbench_master"
    problems = state_writes(master, allowed={master / "runs" / "lifecycle.py"})
    assert not problems, "Run.state assigned outside runs/lifecycle.py:\n" + "\n".join(problems)


def test_no_mpirun_command_is_built_by_hand_in_tests():
    """Tests and benchmarks take mpirun's options from cluster/mpirun.py (launcher_argv), so
    what they measure is launched as runs are."""
    allowed = {ROOT / name for name in MPIRUN_BY_HAND_ALLOWED}
    assert all(path.is_file() for path in allowed), "an allowed file is gone: drop it here"
    problems = mpirun_by_hand(ROOT / "tests", allowed)
    assert not problems, "mpirun built by hand (use launcher_argv):\n" + "\n".join(problems)


# --------------------------------------------------------------------------- the checks


@pytest.fixture
def bad_package(tmp_path, monkeypatch):
    """A package `badpkg` with one violation of each rule."""
    files = {
        "__init__.py": "",
        "a.py": "def f():\n    from badpkg import b\n",
        "b.py": "import badpkg.a\n",
        "runs.py": "def start(run):\n    run.state = 'STARTED'\n",
        "views.py": (
            "import torch\n\n"
            "def cancel(run, Run):\n"
            "    Run.objects.filter(pk=run.pk).update(state='CANCELLED')\n"
            "    Run.objects.filter(state='STARTED').count()\n"
        ),
        "sneaky.py": (
            "def f(run, form, Run, name):\n"
            "    run.state, run.reason = 'FAILED', 'x'\n"
            "    Run.objects.update(**{'state': 'FAILED'})\n"
            "    form.save(state='FAILED')\n"
            "    setattr(run, name, 'FAILED')\n"
            "    Run.objects.update(**{'reason': 'fine'})\n"
        ),
        "api/__init__.py": "",
        "api/models.py": "",
        "api/serializers.py": (
            "from badpkg.api import models\n"
            "from badpkg import runs\n\n"
            "def check():\n"
            "    from badpkg.cluster import driver\n"
        ),
        "cluster/__init__.py": "",
        "cluster/driver.py": "from badpkg import runs\n",
        "cluster/reader.py": "from badpkg.api.models import Run\n",
    }
    for name, text in files.items():
        path = tmp_path / "badpkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path / "badpkg"


def test_the_checks_find_each_kind_of_violation(bad_package):
    graph = build_graph("badpkg")
    cycles = import_cycles(graph, ("badpkg",))
    assert len(cycles) == 1 and "badpkg.a:2 `from badpkg import b`" in cycles[0]
    assert "badpkg.b:1 `import badpkg.a`" in cycles[0]
    assert forbidden_chains(graph, ["badpkg"], "torch") == ["badpkg.views:1 `import torch`"]
    assert forbidden_chains(graph, ["badpkg.cluster"], "badpkg.runs") == [
        "badpkg.cluster.driver:1 `from badpkg import runs`"
    ]
    # A submodule of the forbidden package counts too.
    assert forbidden_chains(graph, ["badpkg.cluster"], "badpkg.api") == [
        "badpkg.cluster.reader:1 `from badpkg.api.models import Run`"
    ]
    with pytest.raises(AssertionError, match="no such module"):
        forbidden_chains(graph, ["badpkg.nothing"], "torch")
    assert direct_imports(graph, "badpkg.api.serializers", ("badpkg.runs", "badpkg.cluster")) == [
        "badpkg.api.serializers:5 `from badpkg.cluster import driver`",
        "badpkg.api.serializers:2 `from badpkg import runs`",
    ]
    (bad_package / "home.py").write_text("def mlbench_home():\n    return '~'\n")
    (bad_package / "api" / "home.py").write_text("x = 1\n\n\ndef mlbench_home():\n    pass\n")
    assert definitions([bad_package], "mlbench_home") == [
        "badpkg/api/home.py:4",
        "badpkg/home.py:1",
    ]
    writes = state_writes(bad_package, allowed={bad_package / "runs.py"})
    lines = sorted(w.split(" ")[0] for w in writes)
    assert lines == [f"badpkg/sneaky.py:{n}" for n in (2, 3, 4, 5)] + ["badpkg/views.py:4"]
    assert len(state_writes(bad_package, allowed=set())) == 6  # runs.py's own line too


def test_the_mpirun_check_finds_each_hand_built_command(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    planted = {
        "bad.py": '''\
            """Run under `mpirun -n 2`: a docstring is no command."""
            import os, shlex, subprocess, sys
            from helpers import MPIRUN
            cmd = [MPIRUN, "-n", "2", sys.executable]
            subprocess.run(["mpirun", "-np", "2", "python", "x.py"])
            argv = [os.path.join(os.path.dirname(sys.executable), "mpirun"), "-n", "2"]
            prefix = [f"{sys.prefix}/bin/mpirun"] + ["-c", "2"]
            local = [*launcher, "--oversubscribe", "--bind-to", "none"]
            script = ["sh", "-c", f"mpirun -n {n} python x.py"]
            steps = shlex.split("/usr/bin/mpiexec -n 4 hostname")
            run_ranks(helpers.MPIRUN, "-n", 2)
        ''',
        "fine.py": '''\
            from mlbench_master.cluster.mpirun import launcher_argv
            cmd = [*launcher_argv(2, tag_output=False, forward=()), sys.executable, "x.py"]
            check = ["sh", "-n", "script.sh"]
            stand_in = ["no-such-mpirun", "-n", "1"]
            ranks = mpirun[mpirun.index("-n") + 1]
            message = "prterun noticed that process rank 1 exited"
            """mpirun -n 2, in a bare string"""
            link = ["ip", "-n", ns, "link"]
            assert "--oversubscribe" not in argv
        ''',
        "expected.py": 'ARGV = ["/v/bin/mpirun", "-n", "2", "--bind-to", "none"]\n',
    }
    for name, text in planted.items():
        (tests / name).write_text(textwrap.dedent(text))
    found = mpirun_by_hand(tests, allowed={tests / "expected.py"})
    assert [f.split(" ")[0] for f in found] == [f"tests/bad.py:{n}" for n in range(4, 12)]
    assert found[0] == 'tests/bad.py:4 `[MPIRUN, "-n", "2", sys.executable]`'
    everything = mpirun_by_hand(tests, allowed=set())
    assert [f.split(" ")[0] for f in everything][-1] == "tests/expected.py:1"
    assert len(everything) == len(found) + 1
