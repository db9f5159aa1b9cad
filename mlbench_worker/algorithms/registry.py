"""Where a run's algorithm comes from: the one registry for built-in and outside algorithms.

`--algorithm` names one of three things:

- a built-in (allreduce, topk, ..., the catalogue's, shared/algorithm_catalogue.py): its
  module in this package, options checked by the catalogue;
- an installed module, `package.module` (a dot in the name): found on the Python path;
- with `--algorithm-source SHA256`, a file uploaded to the master: each rank fetches it from
  the master it reports to (GET <master>/api/algorithms/<sha256>/ with the run's worker
  token), checks its SHA-256 BEFORE anything reads it as code, writes it into a private
  temporary folder and imports it from there. A path to a .py file (`--algorithm
  ./mine.py`) is the same without a master: for trying an algorithm on one machine.

An outside module is read first without running it (shared/algorithm_source.py: NAME, API,
OPTIONS, the one class deriving from public.Algorithm and its `finish`, the imports), so a
wrong version, a missing class or method, or a broken option is refused naming the module
and the class before any of its code runs; then it is imported and its class checked again.
Every refusal is a WorkerError: said once, at start-up, with exit status 2.

Torch is imported only when an algorithm is (`load` of a file or a module), so the option
parser may use `is_outside`.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib
import importlib.util
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlbench_worker.shared import algorithm_catalogue, algorithm_source
from mlbench_worker.training.errors import WorkerError

# The built-ins' modules (a name missing here is the package's module of that name).
MODULES = {
    "allreduce": "mlbench_worker.algorithms.allreduce",
    "powersgd": "mlbench_worker.algorithms.powersgd",
    "topk": "mlbench_worker.algorithms.topk",
    "signsgd": "mlbench_worker.algorithms.signsgd",
    "localsgd": "mlbench_worker.algorithms.localsgd",
    "decentralized": "mlbench_worker.algorithms.decentralized",
}

PACKAGE = "mlbench_worker.algorithms"
SHA256 = re.compile(r"[0-9a-f]{64}")
FETCH_TIMEOUT = 30.0


@dataclass
class Loaded:
    """A run's algorithm, ready to build: where it came from and how to make it."""

    name: str  # the name runs show: the catalogue's, or the module's NAME
    origin: str  # for messages: "built-in topk", "module mypkg.randk", "file my_algo.py"
    module: Any  # the imported module
    builtin: bool
    cls: type | None = None  # an outside (or contract-style built-in) module's class
    declaration: algorithm_source.Declaration | None = None
    path: str | None = None  # the file the module runs from (to name its failing lines)
    extra: dict = field(default_factory=dict)

    def where(self) -> str:
        """The module and class, as every message names them."""
        return f"{self.origin}" + (f" (class {self.cls.__name__})" if self.cls else "")


def is_outside(name: str, source: str | None = None) -> bool:
    """Whether `--algorithm name` (with `--algorithm-source source`) is not a built-in."""
    return bool(source) or "." in name or "/" in name


def module_of(name: str) -> str:
    """The module of built-in `name` (the package's module of that name)."""
    return MODULES.get(name, f"{PACKAGE}.{name}")


def load(
    name: str,
    source: str | None = None,
    master_url: str | None = None,
    token: str | None = None,
) -> Loaded:
    """The algorithm a run names (see the module docstring), or WorkerError saying why not."""
    if source:
        return _from_master(name, source, master_url, token)
    if name.endswith(".py") or "/" in name:
        path = Path(name)
        if not path.is_file():
            raise WorkerError(f"--algorithm {name}: no such file")
        return _from_text(path.read_bytes(), f"file {path.name}", path.name)
    if "." in name:
        return _from_installed(name)
    if name not in algorithm_catalogue.ALGORITHMS:
        raise WorkerError(f"--algorithm {name}: no built-in algorithm of that name")
    module = importlib.import_module(module_of(name))
    return Loaded(name, f"built-in {name}", module, builtin=True)


def check_options(
    loaded: Loaded, raw: dict[str, Any], workers: int | None
) -> tuple[dict[str, Any], list[str]]:
    """`raw` typed and completed by the algorithm's declaration, and what is wrong."""
    if loaded.builtin:
        return algorithm_catalogue.check(loaded.name, raw, workers)
    assert loaded.declaration is not None
    return algorithm_source.check_options(loaded.declaration, raw)


def build(loaded: Loaded, parts: Any, options: dict[str, Any]) -> Any:
    """The algorithm of `loaded` for `parts` (an interface.Parts) with checked `options`."""
    if loaded.builtin and hasattr(loaded.module, "build"):
        return loaded.module.build(parts, options)
    assert loaded.cls is not None
    algorithm = loaded.cls(parts, options)
    algorithm.name = loaded.name
    return algorithm


# --- outside modules -------------------------------------------------------------------------
def _from_master(name: str, sha: str, master_url: str | None, token: str | None) -> Loaded:
    where = f"--algorithm {name} (--algorithm-source {sha})"
    if not SHA256.fullmatch(sha):
        raise WorkerError(f"{where}: --algorithm-source must be a SHA-256 in 64 hex digits")
    if not master_url:
        raise WorkerError(f"{where}: an uploaded algorithm is fetched from the master: "
                          "give --master-url (or MLBENCH_MASTER_URL)")  # fmt: skip
    import requests

    url = f"{master_url.rstrip('/')}/api/algorithms/{sha}/"
    headers = {"Authorization": f"Token {token}"} if token else {}
    try:
        answer = requests.get(url, headers=headers, timeout=FETCH_TIMEOUT)
    except requests.RequestException as exc:
        raise WorkerError(f"{where}: could not fetch {url}: {exc}") from None
    if answer.status_code != 200:
        raise WorkerError(f"{where}: {url} answered {answer.status_code}: {answer.text[:200]}")
    got = hashlib.sha256(answer.content).hexdigest()
    if got != sha:
        raise WorkerError(
            f"{where}: the source fetched from {url} has SHA-256 {got}, not {sha}: "
            "refused before it was read"
        )
    loaded = _from_text(answer.content, f"uploaded file {sha[:12]}", f"{sha}.py")
    if loaded.name != name:
        raise WorkerError(f"{where}: the file declares NAME {loaded.name!r}, not {name!r}")
    return loaded


def _from_text(source: bytes, origin: str, filename: str) -> Loaded:
    """Read `source`'s declaration, write it into a private folder and import it there."""
    declaration = _declared(source, origin)
    folder = Path(tempfile.mkdtemp(prefix="mlbench-algorithm-"))
    atexit.register(shutil.rmtree, folder, True)
    path = folder / filename
    path.write_bytes(source)
    digest = hashlib.sha256(source).hexdigest()[:16]
    module_name = f"mlbench_algorithm_{declaration.name.replace('-', '_')}_{digest}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    _run_import(origin, lambda: spec.loader.exec_module(module))
    return _checked(module, declaration, origin, str(path))


def _from_installed(name: str) -> Loaded:
    origin = f"module {name}"
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:
        raise WorkerError(f"--algorithm {name}: {origin} cannot be found: {exc}") from None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise WorkerError(
            f"--algorithm {name}: {origin} is not installed (not found on the Python path, "
            "or not a .py file); install its package or put it on PYTHONPATH"
        )
    declaration = _declared(Path(spec.origin).read_bytes(), origin)
    module = _run_import(origin, lambda: importlib.import_module(name))
    return _checked(module, declaration, origin, spec.origin)


def _declared(source: bytes, origin: str) -> algorithm_source.Declaration:
    try:
        return algorithm_source.read(source)
    except algorithm_source.DeclarationError as exc:
        raise WorkerError(f"algorithm {origin}: {exc}") from None


def _run_import(origin: str, do: Any) -> Any:
    """Import an algorithm's module; its own errors said with its line, not a traceback."""
    try:
        return do()
    except Exception as exc:  # its code's own failure, whatever it is
        raise WorkerError(f"algorithm {origin} failed to import: {failure(exc)}") from None


def _checked(
    module: Any, declaration: algorithm_source.Declaration, origin: str, path: str
) -> Loaded:
    """The imported module agrees with what was read from its text, and runs this API."""
    from mlbench_worker.algorithms.public import API_VERSION, Algorithm

    where = f"algorithm {origin} (class {declaration.class_name})"
    if getattr(module, "API", None) != API_VERSION:
        raise WorkerError(
            f"{where}: written for API {getattr(module, 'API', None)!r}; this mlbench runs "
            f"API {API_VERSION} (mlbench_worker.algorithms.public.API_VERSION)"
        )
    cls = getattr(module, declaration.class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
        raise WorkerError(f"{where}: the class is not an Algorithm once imported")
    if cls.finish is Algorithm.finish:
        raise WorkerError(f"{where}: does not define finish(self)")
    return Loaded(declaration.name, origin, module, builtin=False, cls=cls,
                  declaration=declaration, path=path)  # fmt: skip


def failure(exc: BaseException, path: str | None = None) -> str:
    """`exc` as one line with the place it was raised: the deepest frame in `path` when
    given (the algorithm's file), else the deepest frame of all."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    if isinstance(exc, SyntaxError) and exc.lineno:
        return f"{exc.filename}, line {exc.lineno}: SyntaxError: {exc.msg}"
    mine = [f for f in frames if path is None or f.filename == path] or frames
    place = f"{Path(mine[-1].filename).name}, line {mine[-1].lineno}: " if mine else ""
    return f"{place}{type(exc).__name__}: {exc}"
