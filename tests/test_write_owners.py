"""One owner per write, enforced: each failure names the offending file, line and code.

- users and API tokens are created or changed only in mlbench_master/accounts/users.py;
- metric points are written only by `store` in mlbench_master/runs/metrics_store.py, for the
  API's ingest and the collector alike.

Migrations are exempt. A companion of tests/test_architecture.py (kept apart for its
size), built the same way: the checks are plain functions run once on the real package and
once on a small planted tree with each kind of violation, so a check that could never fail
is caught too; the real run also checks that the allowed writer itself is seen.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Calls that write a model's rows through its manager, a queryset or an instance.
MODEL_WRITES = {
    "create",
    "get_or_create",
    "update_or_create",
    "bulk_create",
    "update",
    "bulk_update",
    "save",
    "delete",
}

# Users and API tokens are created and changed only in accounts/users.py; metric points are
# written only by metrics_store.store.
USER_WRITER = Path("mlbench_master/accounts/users.py")
METRIC_WRITER = (Path("mlbench_master/runs/metrics_store.py"), "store")
# Methods that write a user whatever the receiver.
USER_METHODS = {"set_password", "set_unusable_password", "create_user", "create_superuser"}
USER_FIELDS = {"password", "is_superuser", "is_staff", "is_active"}
POINT_CREATES = {"create", "bulk_create", "get_or_create", "update_or_create"}
_USER_SQL = re.compile(r"\b(insert\s+into|update|delete\s+from)\s+\W?(auth_user|authtoken_token)\b")
_METRIC_SQL = re.compile(r"\binsert\s+into\s+(\W?api_metric\b(?!rollup)|\{\})", re.IGNORECASE)


def _chain(node: ast.AST) -> set[str]:
    """The names along a receiver: `Token.objects.filter(u=1).exclude(k=2)` gives {Token,
    objects, filter, exclude}; `get_user_model().objects` gives {get_user_model, objects}."""
    names: set[str] = set()
    while True:
        if isinstance(node, ast.Attribute):
            names.add(node.attr)
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            if isinstance(node, ast.Name):
                names.add(node.id)
            return names


def _sql(node: ast.AST) -> str | None:
    """A string literal's text; an f-string's with `{}` for each interpolation."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(str(v.value) if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def _writes_user(node: ast.AST, models: set[str]) -> bool:
    """Whether `node` may create or change a user or a token. `models` are the module's
    names of the two models: User, Token and any name bound to `get_user_model()`.

    Caught: constructing one (`User(...)`, `Token(...)`); a write through its manager or a
    queryset (`Token.objects.get_or_create`, `get_user_model().objects.filter().update`,
    `user.auth_token.delete()`; create, get_or_create, update_or_create, bulk_create,
    update, bulk_update, delete, save); set_password, set_unusable_password, create_user,
    create_superuser on anything; assigning password, is_superuser, is_staff or is_active
    of anything; `.save()` of a name that says user (`user`, `admin_user`); raw SQL that
    inserts, updates or deletes in auth_user or authtoken_token. Not caught: saving a user
    held under another name after changing a field not listed (e.g. `u.email = x; u.save()`).
    """
    if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return any(isinstance(t, ast.Attribute) and t.attr in USER_FIELDS for t in targets)
    sql = _sql(node)
    if sql is not None:
        return bool(_USER_SQL.search(sql.lower()))
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Name):
        return func.id in models
    if not isinstance(func, ast.Attribute):
        return False
    if func.attr in USER_METHODS:
        return True
    if func.attr not in MODEL_WRITES:
        return False
    receiver = _chain(func.value)
    if receiver & (models | {"get_user_model", "auth_token"}):
        return True
    owner = func.value
    return (
        func.attr == "save"
        and isinstance(owner, ast.Name)
        and (owner.id == "user" or owner.id.endswith("_user"))
    )


def _writes_point(node: ast.AST, names_metric: bool) -> bool:
    """Whether `node` may write metric points: `Metric(...)`; create, bulk_create,
    get_or_create or update_or_create through `Metric.objects` (or a queryset of it) or a
    run's `metrics` manager; raw SQL inserting into api_metric, or into an interpolated
    table in a module that names `Metric` (`f"INSERT INTO {table}"` with its db_table)."""
    sql = _sql(node)
    if sql is not None:
        match = _METRIC_SQL.search(sql)
        return match is not None and (match.group(1) != "{}" or names_metric)
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Name):
        return func.id == "Metric"
    if not isinstance(func, ast.Attribute):
        return False
    if func.attr == "Metric":
        return True
    if func.attr not in POINT_CREATES:
        return False
    return bool(_chain(func.value) & {"Metric", "metrics"})


def _scoped(tree: ast.AST) -> list[tuple[str, ast.AST]]:
    """Every node with the name of the top-level function or class it is in ("" outside)."""
    found: list[tuple[str, ast.AST]] = []
    for top in ast.iter_child_nodes(tree):
        scope = top.name if isinstance(top, (ast.FunctionDef, ast.ClassDef)) else ""
        if isinstance(top, ast.AsyncFunctionDef):
            scope = top.name
        found += [(scope, node) for node in ast.walk(top)]
    return found


def _write_lines(root: Path, allowed: dict[Path, str | None], check, context) -> list[str]:
    """Lines of the .py files under `root` (migrations excepted; docstrings and other bare
    strings too) where `check(node, context(tree))` holds, outside `allowed`: a file ->
    the one top-level function or class allowed to write there (None: the whole file)."""
    problems = []
    for path in sorted(root.rglob("*.py")):
        if "migrations" in path.parts or (path in allowed and allowed[path] is None):
            continue
        text = path.read_text()
        tree = ast.parse(text, filename=str(path))
        known = context(tree)
        bare = {
            id(n.value)
            for n in ast.walk(tree)
            if isinstance(n, ast.Expr) and isinstance(n.value, (ast.Constant, ast.JoinedStr))
        }
        lines: dict[int, str] = {}
        for scope, node in _scoped(tree):
            if (path in allowed and scope == allowed[path]) or id(node) in bare:
                continue
            if getattr(node, "lineno", None) not in lines and check(node, known):
                segment = " ".join((ast.get_source_segment(text, node) or "").split())
                where = f"{path.relative_to(root.parent)}:{node.lineno}"
                lines[node.lineno] = f"{where} `{segment[:80]}`"
        problems += [lines[n] for n in sorted(lines)]
    return problems


def _user_models(tree: ast.AST) -> set[str]:
    """User, Token and the names a module binds to `get_user_model()`."""
    bound = {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id == "get_user_model"
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    return {"User", "Token", *bound}


def _names_metric(tree: ast.AST) -> bool:
    return any(
        (isinstance(n, ast.Name) and n.id == "Metric")
        or (isinstance(n, ast.Attribute) and n.attr == "Metric")
        for n in ast.walk(tree)
    )


def user_writes(root: Path, allowed: set[Path]) -> list[str]:
    """Lines outside `allowed` files that may create or change users or tokens."""
    return _write_lines(root, dict.fromkeys(allowed), _writes_user, _user_models)


def metric_writes(root: Path, allowed: dict[Path, str]) -> list[str]:
    """Lines outside the allowed function of each allowed file that may write metric
    points (see _writes_point)."""
    return _write_lines(root, dict(allowed), _writes_point, _names_metric)


# --------------------------------------------------------------------------- the real code


def test_users_and_tokens_are_written_only_in_accounts():
    master = ROOT / "mlbench_master"
    problems = user_writes(master, allowed={ROOT / USER_WRITER})
    assert not problems, "users or tokens written outside accounts/users.py:\n" + "\n".join(
        problems
    )
    seen = user_writes(master, allowed=set())  # the check sees the writer itself
    assert any(line.startswith(str(USER_WRITER)) for line in seen)


def test_metric_points_are_written_only_by_the_metric_store():
    master = ROOT / "mlbench_master"
    path, function = METRIC_WRITER
    problems = metric_writes(master, allowed={ROOT / path: function})
    assert not problems, f"metric points written outside {path}:{function}:\n" + "\n".join(problems)
    seen = metric_writes(master, allowed={})  # the check sees the writer itself
    assert any(line.startswith(str(path)) for line in seen)


# --------------------------------------------------------------------------- the checks


def test_the_writer_checks_find_each_user_token_and_point_write(tmp_path):
    pkg = tmp_path / "mlbench_master"
    planted = {
        "accounts/users.py": "def ensure(User, Token):\n    User.objects.create_user('a')\n",
        "api/migrations/0001_admin.py": "def f(User):\n    User.objects.create(username='m')\n",
        "metrics_store.py": """\
            def store(cursor, Metric):
                cursor.execute(f"INSERT INTO {Metric._meta.db_table} (name) VALUES (%s)")

            def sneak(Metric):
                Metric.objects.create(name="x", value=1)
        """,
        "users.py": """\
            from django.contrib.auth import get_user_model
            from rest_framework.authtoken.models import Token

            def f(request, user, admin_user, cursor, run):
                model = get_user_model()
                model.objects.get_or_create(username="x")
                get_user_model().objects.filter(pk=1).update(is_staff=True)
                user.set_unusable_password()
                admin_user.save()
                request.user.auth_token.delete()
                Token(user=user, key="k")
                user.is_superuser = True
                cursor.execute("UPDATE auth_user SET is_staff = true")
                get_user_model().objects.filter(pk=1).first()
                Token.objects.filter(user=user).exists()
                '''UPDATE auth_user, in a bare string'''
                run.save()
        """,
        "points.py": """\
            from mlbench_master.api.models import Metric

            def f(run, cursor, table):
                Metric.objects.bulk_create([Metric(name="a", value=1)])
                run.metrics.create(name="a", value=1)
                Metric.objects.using("default").get_or_create(name="a", value=1)
                cursor.execute(f"INSERT INTO {table} (name) VALUES (%s)", ["a"])
                cursor.execute('insert into "api_metric" (name) values (1)')
                Metric.objects.filter(run=run).count()
                cursor.execute('INSERT INTO "api_metricrollup" (name) VALUES (1)')
        """,
        "other.py": 'def g(cursor, t):\n    cursor.execute(f"INSERT INTO {t} VALUES (1)")\n',
    }
    for name, text in planted.items():
        path = pkg / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    users = user_writes(pkg, allowed={pkg / "accounts" / "users.py"})
    assert [u.split(" ")[0] for u in users] == [
        f"mlbench_master/users.py:{n}" for n in range(6, 14)
    ]
    assert users[0] == 'mlbench_master/users.py:6 `model.objects.get_or_create(username="x")`'
    assert len(user_writes(pkg, allowed=set())) == len(users) + 1  # users.py's own line
    points = metric_writes(pkg, allowed={pkg / "metrics_store.py": "store"})
    assert [p.split(" ")[0] for p in points] == [
        "mlbench_master/metrics_store.py:5",
        *(f"mlbench_master/points.py:{n}" for n in range(4, 9)),
    ]
    assert len(metric_writes(pkg, allowed={})) == len(points) + 1  # store()'s own line
