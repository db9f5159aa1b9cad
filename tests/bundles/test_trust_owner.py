"""One writer of the trusted keys: only mlbench_master/bundles/trust.py creates, changes or
deletes `TrustedKey` rows (the rule of tests/test_write_owners.py, built with its helpers:
checked on the real package, and on a planted tree so the check is seen to fail)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.test_table_owners import _writes
from tests.test_write_owners import ROOT, _write_lines

WRITER = Path("mlbench_master/bundles/trust.py")
# `TrustedKey(...)`; a write through its manager or a queryset of it; raw SQL writing it:
# the one predicate every table's owner check uses (tests/test_table_owners.py).
_writes_key = _writes("TrustedKey", "api_trustedkey")


def key_writes(root: Path, allowed: set[Path]) -> list[str]:
    return _write_lines(root, dict.fromkeys(allowed), _writes_key, lambda tree: None)


def test_trusted_keys_are_written_only_in_bundles_trust():
    master = ROOT / "mlbench_master"
    problems = key_writes(master, allowed={ROOT / WRITER})
    assert not problems, "trusted keys written outside bundles/trust.py:\n" + "\n".join(problems)
    seen = key_writes(master, allowed=set())  # the check sees the writer itself
    assert any(line.startswith(str(WRITER)) for line in seen)


def test_the_check_finds_each_kind_of_write(tmp_path):
    pkg = tmp_path / "mlbench_master"
    planted = {
        "bundles/trust.py": "def add(TrustedKey):\n    TrustedKey.objects.create(name='a')\n",
        "sneaky.py": """\
            from mlbench_master.api import models
            from mlbench_master.api.models import TrustedKey

            def f(cursor):
                TrustedKey.objects.get_or_create(public_key="k")
                TrustedKey.objects.filter(name="x").update(name="y")
                TrustedKey.objects.all().delete()
                models.TrustedKey(public_key="k")
                cursor.execute("DELETE FROM api_trustedkey")
                TrustedKey.objects.filter(name="x").exists()
                '''INSERT INTO api_trustedkey, in a bare string'''
        """,
    }
    for name, text in planted.items():
        path = pkg / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    found = key_writes(pkg, allowed={pkg / "bundles" / "trust.py"})
    assert [f.split(" ")[0] for f in found] == [
        f"mlbench_master/sneaky.py:{n}" for n in range(5, 10)
    ]
    assert len(key_writes(pkg, allowed=set())) == len(found) + 1  # trust.py's own line
