"""The embedded default runs on SQLite: migrations apply, ingestion with uid de-dup and
the summarize / last_n SQL give the same answers as on PostgreSQL, and a step's grade
posted again replaces the first."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import datetime as dt
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from django.db import connection
assert connection.vendor == "sqlite"
from mlbench_master.runs import metrics_store
from mlbench_master.api import ingest
from mlbench_master.api.models import Metric, Run
from mlbench_master.runs.metric_reads import SeriesQuery, series

run = Run.objects.create(name="x", state="FINISHED")
t0 = dt.datetime(2018, 8, 3, 9, 21, 29, 347960, tzinfo=dt.UTC)
points = [{"run_id": run.pk, "name": "loss", "value": float(i * i % 17), "uid": f"u{i}",
           "date": (t0 + dt.timedelta(seconds=i)).isoformat(),
           "metadata": {"elapsed": 100 + 10 * i} if i % 4 == 3 else {"elapsed": 100 + 2.5 * i}}
          for i in range(10)]
for _ in range(2):  # the retry is stored once
    rows, _ = ingest.parse_points(points)
    metrics_store.store(rows)
assert Metric.objects.count() == 10
got = series(SeriesQuery("run", run.pk, summarize=3))[str(run.pk)]["loss"]
assert [p["value"] for p in got] == [3.5, 10.25, 13.0], got
assert got[-1]["date"] == "2018-08-03T09:21:38.347960Z", got
# each bucket on the benchmark clock at its last point's second, as on PostgreSQL
assert [p["elapsed"] for p in got] == [130.0, 170.0, 122.5], got
got = series(SeriesQuery("run", run.pk, last_n=2))[str(run.pk)]["loss"]
assert [p["elapsed"] for p in got] == [120.0, 122.5], got
assert [p["value"] for p in got] == [13.0, 13.0], got
since = t0 + dt.timedelta(seconds=7)
got = series(SeriesQuery("run", run.pk, since=since))[str(run.pk)]["loss"]
assert len(got) == 2, got
Metric.objects.create(run=run, name="busbw_mbps", value=1.5, date=t0, cumulative=True,
                      metadata={"op": "allreduce", "size": 1024})
got = series(SeriesQuery("run", run.pk, names=["busbw_mbps"]), details=True)[str(run.pk)]
assert got == {"busbw_mbps": [{"date": "2018-08-03T09:21:29.347960Z", "value": 1.5,
               "cumulative": True, "metadata": {"op": "allreduce", "size": 1024}}]}, got
got = series(SeriesQuery("run", run.pk, last_n=1), details=True)[str(run.pk)]["loss"]
assert got[0]["metadata"] == {"elapsed": 122.5} and got[0]["cumulative"] is False, got

import numpy as np
from pathlib import Path
from mlbench_master.runs import frozen
from mlbench_master.grading import prediction_files, scoring
from mlbench_worker.shared.evaluation import generated_labels, predictions
run = Run.objects.create(name="graded", state="STARTED", test_examples=100)
labels = generated_labels.cifar10(run.seed, 100)
for wrong in (10, 0):  # step 5 graded, then other bytes of it refused (write-once)
    guess = labels.copy()
    guess[:wrong] = (guess[:wrong] + 1) % 10
    written = predictions.write(Path(prediction_files.folder(run.pk)) / "new", step=5, epoch=1,
        elapsed=2, test_set_digest=predictions.digest_of(labels), predicted_class=guess)
    tmp = Path(prediction_files.folder(run.pk)) / ".upload-test.tmp"
    written.rename(tmp)
    try:
        scoring.intake(run, tmp, "synthetic", None)
    except frozen.Frozen:
        assert wrong == 0
        prediction_files.discard(tmp)
graded = list(Metric.objects.filter(name="evaluated_val_accuracy").values_list("value", flat=True))
assert graded == [0.9], graded
print("ok")
"""


def test_sqlite_embedded_default(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL",)}
    env.update(MLBENCH_HOME=str(tmp_path), DJANGO_SETTINGS_MODULE="mlbench_master.settings")
    r = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr
