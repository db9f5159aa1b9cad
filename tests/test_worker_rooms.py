"""The rooms of mlbench_worker, enforced (docs/architecture.rst draws them):

- the master imports only `mlbench_worker.shared` of the worker package;
- `shared/` and `client/` never reach torch or TensorFlow (the master image and the client
  install without them);
- the rank body every implementation runs (`training/rank_body.py`) and the record it builds
  (`training/run_record.py`) never reach torch, TensorFlow, pyspark or pyflink: the
  TensorFlow, Spark and Flink processes run them;
- the evaluator (`shared/evaluation/`) reaches only the standard library, numpy,
  onnxruntime, Pillow (task 1b's JPEG files), scipy (ImageNet's meta.mat) and the rest of
  `shared/`: no implementation, trainer, model or framework can touch a grade (this check
  lives here, not in tests/test_architecture.py, which is at the file size limit);
- no two modules share a file name while holding different things: the names that repeat
  are listed here with what every module of that name holds (a task folder's parts, on
  purpose), so a new `report.py` beside another one fails until it gets a name of its own.

Each check runs once on the real packages and once on a small pair of packages written by
the test with a violation of each kind, so a check that could never fail is caught too.
"""

from __future__ import annotations

import sys
import textwrap
from collections import defaultdict
from pathlib import Path

import grimp
import pytest

from tests.test_architecture import _where, build_graph, forbidden_chains

ROOT = Path(__file__).resolve().parent.parent
WORKER = ROOT / "mlbench_worker"

# A file name several modules share, and what every one of them holds.
SHARED_NAMES = {
    "__init__.py": "a package's top",
    "__main__.py": "a `python -m` entry",
    "api.py": "ApiClient (client/api.py; mlbench_worker/api.py keeps its original path)",
    "task.py": "a task folder's tasks, built from their catalogue entries",
    "data.py": "what a task's ranks train and evaluate on (an implementation's feed of it)",
    "setup.py": "a task folder's set-up of one run",
    "synthetic.py": "a task folder's generated stand-in for its real data set",
    "reader.py": "a task folder's reader of its real data set's files",
    "train.py": "a trainer of one task family or implementation, on the reference loop's rules",
    "options.py": "the command line of a worker command (training, backend benchmark)",
    "cluster.py": "an implementation's framework cluster over the ranks mpirun started",
    "session.py": "an implementation's parts of the one rank body (training/rank_body.py)",
}


def master_imports_outside(graph: grimp.ImportGraph, master: str, shared: str) -> list[str]:
    """Imports by `master`'s modules of its sibling worker package outside `shared`."""
    worker = shared.split(".")[0]
    problems = []
    for module in sorted(m for m in graph.modules if m.split(".")[0] == master):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            inside = imported == shared or imported.startswith(shared + ".")
            if imported.split(".")[0] == worker and not inside:
                problems.append(_where(graph, module, imported))
    return problems


def reaches_outside(
    graph: grimp.ImportGraph, package: str, rooms: tuple[str, ...], libraries: set[str]
) -> list[str]:
    """Every module `package` reaches, directly or through others, that is neither in one
    of `rooms` (its own project's packages it may use), the standard library, nor one of
    `libraries` (top-level names), each with its shortest chain of imports."""
    assert package in graph.modules, f"no module {package} (the check would prove nothing)"
    project = package.split(".")[0]
    problems = []
    for module in sorted(graph.find_upstream_modules(package, as_package=True)):
        top = module.split(".")[0]
        if top == project:
            if any(module == r or module.startswith(r + ".") for r in rooms):
                continue
        elif top in sys.stdlib_module_names or top in libraries:
            continue
        problems += forbidden_chains(graph, [package], module)
    return problems


def repeated_names(package: Path, allowed: dict[str, str]) -> list[str]:
    """File names used by more than one module of `package` and not in `allowed`."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(package.rglob("*.py")):
        where[path.name].append(str(path.relative_to(package.parent)))
    return [
        f"{name}: {', '.join(paths)}"
        for name, paths in sorted(where.items())
        if len(paths) > 1 and name not in allowed
    ]


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return build_graph("mlbench_master", "mlbench_worker")


def test_the_master_imports_only_shared(graph):
    problems = master_imports_outside(graph, "mlbench_master", "mlbench_worker.shared")
    assert not problems, "the master imports worker internals:\n" + "\n".join(problems)


@pytest.mark.parametrize("framework", ["torch", "tensorflow", "pyspark", "pyflink"])
def test_shared_and_client_never_import_a_framework(graph, framework):
    rooms = ["mlbench_worker.shared", "mlbench_worker.client", "mlbench_worker.api"]
    chains = forbidden_chains(graph, rooms, framework)
    assert not chains, f"shared/ or client/ reaches {framework}:\n" + "\n".join(chains)


RANK_BODY = ["mlbench_worker.training.rank_body", "mlbench_worker.training.run_record"]


@pytest.mark.parametrize("framework", ["torch", "tensorflow", "pyspark", "pyflink"])
def test_the_rank_body_never_imports_a_framework(graph, framework):
    chains = forbidden_chains(graph, RANK_BODY, framework)
    assert not chains, f"the rank body reaches {framework}:\n" + "\n".join(chains)


# The evaluator grades every run: it may reach the standard library, numpy, onnxruntime (the
# ONNX audit runs a run's model with it), Pillow (the audit of task 1b decodes, resizes and
# crops the validation JPEG files itself, and makes the generated set's again from
# shared/imagenet_synthetic.py's recipe), scipy and shared/'s plain data, nothing else.
# scipy: real ImageNet's labels are in the development kit's meta.mat, a MATLAB file that
# scipy.io.loadmat reads (shared/imagenet_devkit.py imports it inside the function that
# reads one; tests/evaluation/test_imagenet_labels.py checks that grading other sets never
# loads it).
EVALUATOR = "mlbench_worker.shared.evaluation"
EVALUATOR_ROOMS = ("mlbench_worker.shared",)
# sacrebleu: a translation task's BLEU is the evaluator's, computed as WMT reports it (bleu.py).
# sentencepiece: the audit of a translation model maps the evaluator's sources and the
# posted pieces to the model's ids with the vocabulary the model carries (translation_audit.py).
EVALUATOR_LIBRARIES = {"numpy", "onnxruntime", "PIL", "scipy", "sacrebleu", "sentencepiece"}


def test_the_evaluator_reaches_no_implementation_trainer_model_or_framework(graph):
    problems = reaches_outside(graph, EVALUATOR, EVALUATOR_ROOMS, EVALUATOR_LIBRARIES)
    assert not problems, "the evaluator reaches beyond numpy and shared/:\n" + "\n".join(problems)


def test_no_two_modules_share_a_name_for_different_things():
    problems = repeated_names(WORKER, SHARED_NAMES)
    assert not problems, (
        "modules share a name (give one a name that says what it holds, or, if they hold "
        "the same part, say so in SHARED_NAMES):\n" + "\n".join(problems)
    )


# --------------------------------------------------------------------------- the checks


@pytest.fixture
def bad_packages(tmp_path, monkeypatch):
    """`badmaster` importing `badworker` past its shared room; a torch import reached from
    `badworker.shared` and a tensorflow one from `badworker.client`; two `report.py`; an
    evaluator reaching a model (and through it tensorflow) and pandas; pyspark from the
    client inside a function."""
    files = {
        "badmaster/__init__.py": "",
        "badmaster/views.py": "from badworker.shared import catalogue\n",
        "badmaster/jobs.py": "from badworker.shared.catalogue import TASKS\n"
        "from badworker.training import run\n",
        "badworker/__init__.py": "",
        "badworker/shared/__init__.py": "",
        "badworker/shared/catalogue.py": "TASKS = {}\n\n\ndef f():\n"
        "    from badworker.training import run\n",
        "badworker/training/__init__.py": "",
        "badworker/training/run.py": "import torch\n",
        "badworker/training/report.py": "",
        "badworker/client/__init__.py": "",
        "badworker/client/report.py": "import tensorflow\n",
        "badworker/client/engine.py": "def f():\n    from pyspark.sql import SparkSession\n",
        "badworker/shared/evaluation/__init__.py": "",
        "badworker/shared/table.py": "import json\n",
        "badworker/shared/evaluation/grade.py": "import math\nimport numpy\n"
        "from badworker.shared import table\n\n\ndef grade():\n"
        "    from badworker.models import net\n",
        "badworker/shared/evaluation/audit.py": "import pandas\nimport onnxruntime\n",
        "badworker/shared/evaluation/labels.py": "def f():\n    from scipy.io import loadmat\n",
        "badworker/shared/evaluation/export.py": "def f():\n    import tf2onnx\n",
        "badworker/models/__init__.py": "",
        "badworker/models/net.py": "import tensorflow\n",
    }
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_the_checks_find_each_kind_of_violation(bad_packages):
    graph = build_graph("badmaster", "badworker")
    assert master_imports_outside(graph, "badmaster", "badworker.shared") == [
        "badmaster.jobs:2 `from badworker.training import run`"
    ]
    assert forbidden_chains(graph, ["badworker.shared"], "torch") == [
        "badworker.shared.catalogue:5 `from badworker.training import run` ; "
        "badworker.training.run:1 `import torch`"
    ]
    assert forbidden_chains(graph, ["badworker.client"], "tensorflow") == [
        "badworker.client.report:1 `import tensorflow`"
    ]
    assert forbidden_chains(graph, ["badworker.client"], "pyspark") == [
        "badworker.client.engine:2 `from pyspark.sql import SparkSession`"
    ]
    # The evaluator's room: what it reaches past numpy and shared/, through a model too.
    evaluation = "badworker.shared.evaluation"
    allowed = EVALUATOR_LIBRARIES  # the evaluator's own: grades, the ONNX audit, meta.mat
    assert reaches_outside(graph, evaluation, ("badworker.shared",), allowed) == [
        "badworker.shared.evaluation.grade:7 `from badworker.models import net`",
        "badworker.shared.evaluation.audit:1 `import pandas`",  # scipy (labels.py) passes
        "badworker.shared.evaluation.grade:7 `from badworker.models import net` ; "
        "badworker.models.net:1 `import tensorflow`",
        "badworker.shared.evaluation.export:2 `import tf2onnx`",  # exporting is the worker's
    ]
    # A model in a permitted room is still caught by the framework it imports.
    anything = {"numpy", "scipy", "pandas", "onnxruntime", "tf2onnx"}
    assert reaches_outside(graph, evaluation, ("badworker",), anything) == [
        "badworker.shared.evaluation.grade:7 `from badworker.models import net` ; "
        "badworker.models.net:1 `import tensorflow`"
    ]
    assert repeated_names(bad_packages / "badworker", {"__init__.py": ""}) == [
        "report.py: badworker/client/report.py, badworker/training/report.py"
    ]
    assert repeated_names(bad_packages / "badworker", {"__init__.py": "", "report.py": ""}) == []
