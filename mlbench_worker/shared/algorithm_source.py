"""The declaration of an outside training algorithm, read from its source without running it.

An algorithm a researcher writes (docs/algorithms.rst, "Your own algorithm") is one Python
module that states at its top level, as literals:

    NAME = "myalgo"                 # how runs, pages and the board name it
    API = 1                         # the version of the interface it was written for
    OPTIONS = (Option("lr_scale", "float", 1.0, "what it does", above=0.0), ...)

imports nothing of mlbench but `mlbench_worker.algorithms.public`, and has exactly one class
deriving from `Algorithm` that defines `finish`. The master reads this when the file is
uploaded and when a run names it, so a run's options are checked at POST with the same
rules and words as a built-in algorithm's (algorithm_catalogue.Option), before any rank
starts; the worker reads it again before it imports the file.

Why `ast` and never an import: the master must not run code a client sent (it has no torch
either), and a declaration computed at import time could differ from one run to the next.
No torch, no Django: the master, the client and the worker all import this module.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass
from typing import Any

from mlbench_worker.shared.algorithm_catalogue import ALGORITHMS, Option, typed_options

# The interface versions this code runs (the worker's public.API is the newest of them).
SUPPORTED_APIS = (1,)
# The one module of mlbench an algorithm may import: the rest may change at any release.
PUBLIC_MODULE = "mlbench_worker.algorithms.public"
BASE_CLASS = "Algorithm"
REQUIRED_METHOD = "finish"
# What the loop calls besides `finish` (the interface's other methods, all optional).
KNOWN_METHODS = ("begin", "finish", "step", "after_step", "evaluation", "describe")
# A name as runs, the board and the command line show it; a dot means an installed module.
NAME_PATTERN = re.compile(r"[a-z][a-z0-9_-]{0,31}")
OPTION_KEYWORDS = ("minimum", "above", "maximum", "choices")


class DeclarationError(ValueError):
    """The source is not an algorithm module as the contract says (the message says why)."""


@dataclass(frozen=True)
class Declaration:
    """What an algorithm module declares: its name, interface version, options, its class
    and the methods of the interface that class defines."""

    name: str
    api: int
    options: tuple[Option, ...]
    class_name: str
    methods: tuple[str, ...]

    def option(self, name: str) -> Option | None:
        return next((o for o in self.options if o.name == name), None)

    def defaults(self) -> dict[str, Any]:
        return {o.name: o.default for o in self.options}


def sha256(source: bytes) -> str:
    """The content address of a source file: the hash the worker checks before importing."""
    return hashlib.sha256(source).hexdigest()


def read(source: bytes | str) -> Declaration:
    """The declaration of `source`, or DeclarationError naming the first thing wrong."""
    text = _text(source)
    try:
        tree = ast.parse(text, filename="<algorithm>")
    except SyntaxError as exc:
        raise DeclarationError(f"not Python: line {exc.lineno}: {exc.msg}") from None
    except ValueError as exc:  # a null byte
        raise DeclarationError(f"not Python: {exc}") from None
    _check_imports(tree)
    assigned = _top_level_assignments(tree)
    name = _name(assigned)
    api = _api(assigned)
    options = _options(assigned)
    class_name, methods = _algorithm_class(tree)
    return Declaration(name, api, options, class_name, methods)


def _text(source: bytes | str) -> str:
    if isinstance(source, str):
        return source
    try:
        return source.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DeclarationError(
            f"not Python source: byte {exc.start} is not UTF-8 (send the .py file as UTF-8 text)"
        ) from None


def _check_imports(tree: ast.Module) -> None:
    """Only the public module of mlbench: its internals change without notice."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        else:
            continue
        for module in modules:
            ours = module.split(".")[0] in ("mlbench_worker", "mlbench_master", "mlbench")
            public = module == PUBLIC_MODULE or (
                isinstance(node, ast.ImportFrom) and module == "mlbench_worker.algorithms"
                and [a.name for a in node.names] == ["public"]
            )  # fmt: skip
            if ours and not public:
                raise DeclarationError(
                    f"line {node.lineno}: imports {module}; an algorithm may import only "
                    f"{PUBLIC_MODULE} of mlbench (the rest changes without notice)"
                )


def _top_level_assignments(tree: ast.Module) -> dict[str, list[ast.AST]]:
    found: dict[str, list[ast.AST]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        for target in targets:
            if isinstance(target, ast.Name) and target.id in ("NAME", "API", "OPTIONS"):
                found.setdefault(target.id, []).append(value)
    return found


def _one(assigned: dict[str, list[ast.AST]], key: str, example: str) -> ast.AST:
    values = assigned.get(key, [])
    if not values:
        raise DeclarationError(f"{key} is missing: declare it at the top level, e.g. {example}")
    if len(values) > 1:
        raise DeclarationError(f"{key} is assigned {len(values)} times; assign it once")
    return values[0]


def _literal(node: ast.AST, what: str) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise DeclarationError(
            f"line {getattr(node, 'lineno', '?')}: {what} is not a literal; write the value "
            "itself (the master reads it without running the file)"
        ) from None


def _name(assigned: dict[str, list[ast.AST]]) -> str:
    name = _literal(_one(assigned, "NAME", 'NAME = "myalgo"'), "NAME")
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise DeclarationError(
            f"NAME must be a string of lower-case letters, digits, _ and - (up to 32, a "
            f"letter first), not {name!r}"
        )
    if name in ALGORITHMS:
        raise DeclarationError(
            f"NAME {name!r} is a built-in algorithm's; choose another name (built-in: "
            f"{', '.join(ALGORITHMS)})"
        )
    return name


def _api(assigned: dict[str, list[ast.AST]]) -> int:
    api = _literal(_one(assigned, "API", "API = 1"), "API")
    if not isinstance(api, int) or isinstance(api, bool):
        raise DeclarationError(f"API must be a whole number (the interface version), not {api!r}")
    if api not in SUPPORTED_APIS:
        raise DeclarationError(
            f"API version {api} is not supported by this mlbench (it runs "
            f"{', '.join(map(str, SUPPORTED_APIS))})"
        )
    return api


def _options(assigned: dict[str, list[ast.AST]]) -> tuple[Option, ...]:
    node = _one(assigned, "OPTIONS", 'OPTIONS = (Option("rate", "float", 0.1, "help"),)')
    if not isinstance(node, ast.Tuple | ast.List):
        raise DeclarationError(
            f"line {node.lineno}: OPTIONS must be a tuple of Option(...) calls written out"
        )
    options: list[Option] = []
    for item in node.elts:
        option = _option(item)
        if any(o.name == option.name for o in options):
            raise DeclarationError(f"option {option.name!r} is declared twice")
        options.append(option)
    return tuple(options)


def _option(node: ast.AST) -> Option:
    line = getattr(node, "lineno", "?")
    func = node.func if isinstance(node, ast.Call) else None
    called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
    if called != "Option":
        raise DeclarationError(f"line {line}: each entry of OPTIONS must be Option(...)")
    assert isinstance(node, ast.Call)  # called is "Option" only for a call
    args = [_literal(a, f"Option's argument {i + 1}") for i, a in enumerate(node.args)]
    kwargs = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            raise DeclarationError(f"line {line}: Option(**...) is not literal; name each argument")
        kwargs[keyword.arg] = _literal(keyword.value, f"Option's {keyword.arg}")
    if isinstance(kwargs.get("choices"), list):
        kwargs["choices"] = tuple(kwargs["choices"])
    try:
        option = Option(*args, **kwargs)
    except TypeError as exc:
        raise DeclarationError(f"line {line}: Option(...): {exc}") from None
    return _checked(option, line)


def _checked(option: Option, line: object) -> Option:
    """The option as the catalogue's are: a name a command line can write, a known type,
    numbers as bounds, choices of text, and a default it accepts itself."""
    where = f"line {line}: option {option.name!r}"
    if not isinstance(option.name, str) or not re.fullmatch(r"[a-z][a-z0-9_]{0,63}", option.name):
        raise DeclarationError(f"line {line}: an option's name must be lower_case_words, "
                               f"not {option.name!r}")  # fmt: skip
    if option.type not in ("int", "float", "choice"):
        raise DeclarationError(f"{where}: type must be int, float or choice, not {option.type!r}")
    if not isinstance(option.help, str):
        raise DeclarationError(f"{where}: help must be text")
    for bound in ("minimum", "above", "maximum"):
        value = getattr(option, bound)
        if value is not None and (not isinstance(value, int | float) or isinstance(value, bool)):
            raise DeclarationError(f"{where}: {bound} must be a number, not {value!r}")
    if option.type == "choice":
        if not option.choices or not all(
            isinstance(c, str) and c == c.strip().lower() and c for c in option.choices
        ):
            raise DeclarationError(f"{where}: a choice needs choices=(...) of lower-case text")
    elif option.choices:
        raise DeclarationError(f"{where}: choices are for type 'choice' only")
    value, why = option.parse(option.default)
    if why:
        raise DeclarationError(f"{where}: its default is refused by its own rules: {why}")
    same = value == option.default and type(value) is type(option.default)
    return option if same else _with_default(option, value)


def _with_default(option: Option, value: Any) -> Option:
    """The option with its default typed (an int default of a float option: 1 -> 1.0)."""
    return Option(option.name, option.type, value, option.help, option.minimum, option.above,
                  option.maximum, option.choices)  # fmt: skip


def _algorithm_class(tree: ast.Module) -> tuple[str, tuple[str, ...]]:
    classes = [
        node for node in tree.body
        if isinstance(node, ast.ClassDef) and any(_is_base(b) for b in node.bases)
    ]  # fmt: skip
    if not classes:
        raise DeclarationError(
            f"no class derives from {BASE_CLASS}: write one, e.g. `class Mine({BASE_CLASS}):` "
            f"with {BASE_CLASS} imported from {PUBLIC_MODULE}"
        )
    if len(classes) > 1:
        names = ", ".join(c.name for c in classes)
        raise DeclarationError(
            f"{len(classes)} classes derive from {BASE_CLASS} ({names}); a module holds one"
        )
    cls = classes[0]
    defined = {
        node.name for node in cls.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    if REQUIRED_METHOD not in defined:
        raise DeclarationError(
            f"class {cls.name} does not define {REQUIRED_METHOD}(self): the loop calls it "
            "after backward to combine the ranks' gradients"
        )
    return cls.name, tuple(m for m in KNOWN_METHODS if m in defined)


def _is_base(node: ast.AST) -> bool:
    if isinstance(node, ast.Name):
        return node.id == BASE_CLASS
    return isinstance(node, ast.Attribute) and node.attr == BASE_CLASS


def served(declaration: Declaration) -> list[dict[str, Any]]:
    """The declared options as the API serves every algorithm's (GET /api/runs/defaults/)."""
    return [
        {
            "name": o.name,
            "type": o.type,
            "default": o.default,
            "help": o.help,
            "bounds": o.bounds(),
            "choices": list(o.choices),
        }
        for o in declaration.options
    ]


def check_options(
    declaration: Declaration, options: dict[str, Any] | None
) -> tuple[dict[str, Any], list[str]]:
    """Options typed and completed with the declared defaults, and what is wrong, in the
    words algorithm_catalogue.check uses for a built-in algorithm."""
    return typed_options(declaration.name, declaration.options, options)
