"""Each table has its writers, named here (the rule of tests/test_write_owners.py, built with
its helpers; the users, tokens and metric points are held there, the trusted keys in
tests/bundles/test_trust_owner.py): checked on the real package, and on a planted tree so
each check is seen to fail.

- the price table (NodePrice): only mlbench_master/runs/price_table.py;
- log rows (LogChunk): mlbench_master/runs/logs.py, and the import of a bundle's logs
  (mlbench_master/bundles/importer.py), which stores rows another master wrote.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import pytest

from tests.test_write_owners import MODEL_WRITES, ROOT, _chain, _sql, _write_lines

OWNERS = {
    "NodePrice": ({Path("mlbench_master/runs/price_table.py")}, "api_nodeprice"),
    "LogChunk": (
        {Path("mlbench_master/runs/logs.py"), Path("mlbench_master/bundles/importer.py")},
        "api_logchunk",
    ),
}


def _writes(model: str, table: str):
    pattern = re.compile(rf"\b(insert\s+into|update|delete\s+from)\s+\W?{table}\b", re.I)

    def check(node: ast.AST, _: object) -> bool:
        """`Model(...)`; a write through its manager or a queryset of it; raw SQL."""
        sql = _sql(node)
        if sql is not None:
            return bool(pattern.search(sql))
        if not isinstance(node, ast.Call):
            return False
        func = node.func
        if isinstance(func, ast.Name):
            return func.id == model
        if isinstance(func, ast.Attribute) and func.attr == model:
            return True
        return (
            isinstance(func, ast.Attribute)
            and func.attr in MODEL_WRITES
            and model in _chain(func.value)
        )

    return check


def writes(root: Path, model: str, allowed: set[Path]) -> list[str]:
    _, table = OWNERS[model]
    return _write_lines(root, dict.fromkeys(allowed), _writes(model, table), lambda tree: None)


@pytest.mark.parametrize("model", sorted(OWNERS))
def test_each_table_is_written_only_by_its_owners(model):
    owners, _ = OWNERS[model]
    master = ROOT / "mlbench_master"
    problems = writes(master, model, {ROOT / p for p in owners})
    assert not problems, f"{model} written outside {sorted(map(str, owners))}:\n" + "\n".join(
        problems
    )
    seen = writes(master, model, set())  # the check sees each owner write
    for owner in owners:
        assert any(line.startswith(str(owner)) for line in seen), owner


@pytest.mark.parametrize("model", sorted(OWNERS))
def test_the_check_finds_each_kind_of_write(tmp_path, model):
    _, table = OWNERS[model]
    pkg = tmp_path / "mlbench_master"
    sneaky = pkg / "sneaky.py"
    sneaky.parent.mkdir(parents=True)
    sneaky.write_text(
        textwrap.dedent(f"""\
        from mlbench_master.api import models
        from mlbench_master.api.models import {model}

        def f(cursor, row):
            {model}.objects.create(pk=1)
            {model}.objects.filter(pk=1).update(pk=2)
            {model}.objects.all().delete()
            {model}(pk=3).save()
            models.{model}.objects.bulk_create([])
            cursor.execute("DELETE FROM {table} WHERE id = 1")
        """)
    )
    found = writes(pkg, model, set())
    assert len(found) == 6, found
