"""Every table of the master has its writers, named here (the rule of
tests/test_write_owners.py, built with its helpers; users, tokens and metric points, whose
checks need more than a model's name, are held there): checked on the real package, and on
a planted tree so each check is seen to fail.

A run's rows are written only under mlbench_master/runs/, one module a concern; the rows
that say where an imported run came from and which keys are trusted only under
mlbench_master/bundles/. A table added to api/models.py without an owner here fails
`test_every_table_has_its_owners`.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import pytest

from tests.test_write_owners import MODEL_WRITES, ROOT, _chain, _sql, _write_lines

RUNS = Path("mlbench_master/runs")
BUNDLES = Path("mlbench_master/bundles")
STUDIES = Path("mlbench_master/studies")
RESULTS = Path("mlbench_master/results")
OWNERS = {
    # The run's state and fields; the size of its stored log.
    "Run": ({RUNS / "lifecycle.py", RUNS / "logs.py"}, "api_run"),
    "Series": ({RUNS / "series.py"}, "api_series"),
    "Pod": ({RUNS / "pods.py"}, "api_pod"),
    "LogChunk": ({RUNS / "logs.py"}, "api_logchunk"),
    "NodePrice": ({RUNS / "price_table.py"}, "api_nodeprice"),
    "ImportedBundle": ({BUNDLES / "importer.py"}, "api_importedbundle"),
    # Made by the import; its re-grade verdict set by the re-grade.
    "RunOrigin": ({BUNDLES / "importer.py", BUNDLES / "regrade.py"}, "api_runorigin"),
    "TrustedKey": ({BUNDLES / "trust.py"}, "api_trustedkey"),
    "Study": ({STUDIES / "store.py"}, "api_study"),
    "StudyCell": ({STUDIES / "store.py"}, "api_studycell"),
    # What a read of the results keeps (declared in results/models.py, which raises a run's
    # version for a change in a file; the database's triggers raise it for the rest).
    "StoredResult": ({RESULTS / "models.py", RESULTS / "kept_runs.py"}, "api_storedresult"),
    "StoredEntry": ({RESULTS / "kept_entries.py"}, "api_storedentry"),
}
# Tables whose one writer tests/test_write_owners.py holds (written by SQL it recognizes).
HELD_ELSEWHERE = {"Metric", "MetricRollup"}
MODELS = Path("mlbench_master/api/models.py")


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


def tables(models_file: Path) -> list[str]:
    """The Django models a models module declares (classes deriving from models.Model)."""
    tree = ast.parse(models_file.read_text())
    return sorted(
        node.name
        for node in tree.body
        if isinstance(node, ast.ClassDef)
        and any(isinstance(b, ast.Attribute) and b.attr == "Model" for b in node.bases)
    )


def without_owner(models_file: Path) -> list[str]:
    return [t for t in tables(models_file) if t not in OWNERS and t not in HELD_ELSEWHERE]


def test_every_table_has_its_owners():
    assert len(tables(ROOT / MODELS)) >= 10  # the reader finds the tables
    assert without_owner(ROOT / MODELS) == []


def test_the_table_list_finds_a_new_table(tmp_path):
    planted = tmp_path / "models.py"
    planted.write_text(
        "from django.db import models\n\n\nclass Run(models.Model):\n    pass\n\n\n"
        "class Review(models.Model):\n    pass\n\n\nclass Helper:\n    pass\n"
    )
    assert without_owner(planted) == ["Review"]


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
