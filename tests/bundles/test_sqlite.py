"""The embedded default's database is SQLite: a bundle is exported and imported there too
(metric points by the prepared INSERT, log chunks, the origin rows), in a process of its
own so Django is set up on SQLite, with two homes for two installations' keys."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import datetime as dt, pathlib, sys
import django
django.setup()
from django.conf import settings
from django.core.management import call_command
call_command("migrate", verbosity=0)
from django.db import connection
assert connection.vendor == "sqlite"
from mlbench_master.runs import metrics_store
from mlbench_master.runs.logs import append_logs
from mlbench_master.api.models import Metric, Run, RunOrigin
from mlbench_master.bundles import importer, writer

run = Run.objects.create(name="x", state="FINISHED", task="resnet20-cifar10")
t0 = dt.datetime(2026, 11, 1, 9, 0, 0, 347960, tzinfo=dt.UTC)
metrics_store.store([
    metrics_store.Point(run.pk, None, "val_accuracy", 0.1 * i, t0 + dt.timedelta(seconds=i),
                        False, {"elapsed": float(i), "epoch": i, "step": i}, f"u{i}")
    for i in range(1, 6)
])
append_logs(run, [(0, "stdout", "hello\\n"), (None, "stderr", "bye\\n")])
body = b"".join(writer.stream(writer.select([run]), "tester"))
bundle = pathlib.Path(sys.argv[1]) / "b.zip"
bundle.write_bytes(body)
settings.MLBENCH_HOME = pathlib.Path(sys.argv[1]) / "other"  # another installation's key
done = importer.import_file(bundle, None)
assert done.stored == 1, done
copy = Run.objects.get(pk=done.runs[0]["id"])
rows = lambda r: list(Metric.objects.filter(run=r).order_by("date").values_list("name", "value", "date", "metadata"))
assert rows(copy) == rows(run), (rows(copy), rows(run))
assert [c.text for c in copy.log_chunks.order_by("seq")] == ["hello\\n", "bye\\n"]
assert RunOrigin.objects.get(run=copy).origin_run == run.pk
assert importer.import_file(bundle, None).stored == 0
print("ok")
"""


def test_export_and_import_on_sqlite(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLBENCH_")}
    env.pop("DATABASE_URL", None)
    env.update(MLBENCH_HOME=str(tmp_path), DJANGO_SETTINGS_MODULE="mlbench_master.settings")
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr
