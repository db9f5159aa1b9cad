"""The large installation bench_pages.py times (issue 49, item 3): 10,000 runs, 100 series
(3 seeds x 3 worker counts), 1,000 of the runs imported from two other installations (one
trusted here, one not; 10 of the series among them), each run with a training curve of
REPORTS reports (11 points each, as rank 0 posts them: loss, accuracy, rate, clock, epoch,
throughput, four timings, bytes) and EVALS evaluations, half of them graded by the
evaluator, a summary as a worker posts it, and a few algorithm studies made by the master's
own study code with every run ended and graded. Rows are made with bulk inserts (the ORM's
bulk_create, the metric points by PostgreSQL itself with INSERT ... SELECT generate_series,
the evaluations with COPY). BENCH_PAGES_RUNS and BENCH_PAGES_REPORTS make a smaller one.
Django is set up by the caller before `fill`.
"""

from __future__ import annotations

import base64
import io
import os
import random

RUNS = int(os.environ.get("BENCH_PAGES_RUNS", "10000"))
SERIES = 100
SERIES_SEEDS, SERIES_WORKERS = (1, 2, 3), (1, 2, 4)
IMPORTED = RUNS // 10
IMPORTED_SERIES = SERIES // 10
REPORTS = int(os.environ.get("BENCH_PAGES_REPORTS", "20"))  # x 11 points: the curve
EVALS = 5
# Tasks whose goal is an accuracy (task 3's perplexity is left to its own benchmarks), with
# the real data set each records.
TASKS = {"resnet20-cifar10": "cifar10", "resnet56-cifar10": "cifar10",
         "logreg-epsilon": "epsilon", "resnet50-imagenet": "imagenet"}  # fmt: skip
TRAINING = ("train_loss", "train_accuracy", "learning_rate", "epoch", "elapsed", "time_data",
            "time_compute", "time_comm", "time_comm_total", "comm_bytes")  # fmt: skip
STUDIES = [
    {"name": f"study {i}", "workloads": ["logreg-epsilon", "resnet20-cifar10"],
     "conditions": ["unlimited", "10mbit"], "seeds": [1, 2],
     "algorithms": ["allreduce", {"algorithm": "topk", "options": {"density": 0.1}},
                    {"algorithm": "topk", "options": {"density": 0.01}}]}
    for i in range(3)
]  # fmt: skip


def _public_key() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    raw = (
        Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    )
    return base64.b64encode(raw).decode("ascii")


def _summary(task: str, seed: int, workers: int, curve: list[float], goal: float) -> dict:
    from mlbench_worker.shared import catalogue
    from tests.summaries import summary_body

    reached = next((i for i, a in enumerate(curve) if a >= goal), None)
    return summary_body(
        task, dataset=TASKS[task], num_workers=workers, seed=seed, target="light",
        target_accuracy=goal, reached=reached is not None,
        time_to_target=None if reached is None else _eval_clock(reached),
        final_val_accuracy=curve[-1], best_val_accuracy=max(curve), epochs=float(EVALS),
        throughput=800.0 + seed, elapsed=_eval_clock(EVALS - 1),
        config={"batch_size": catalogue.get(task).batch_size},
    )  # fmt: skip


def _eval_clock(i: int) -> float:
    return 60.0 * (i + 1)


def fill(db_url: str, user: object) -> dict:
    """The installation described in the module docstring; what was made, by kind."""
    import datetime as dt

    import psycopg
    from django.db import transaction
    from django.utils import timezone

    from mlbench_master.api.models import ImportedBundle, Run, RunOrigin, Series
    from mlbench_master.bundles import signing, trust
    from mlbench_worker.shared import catalogue

    rng = random.Random(49)
    ended = timezone.now() - dt.timedelta(days=1)  # past the grace for late results
    trusted, stranger = _public_key(), _public_key()
    trust.add(trusted, "a trusted installation", None)
    study_runs = make_studies(user)
    start = Run.objects.order_by("-id").values_list("id", flat=True).first() or 0
    runs, curves, origins = [], {}, []
    series = [
        Series(name=f"series {i}", seeds=list(SERIES_SEEDS), worker_counts=list(SERIES_WORKERS),
               settings={"task": list(TASKS)[i % len(TASKS)], "target": "light"})
        for i in range(SERIES)
    ]  # fmt: skip
    with transaction.atomic():
        Series.objects.bulk_create(series)
        plan = [(s, seed, w) for s in series for seed in SERIES_SEEDS for w in SERIES_WORKERS]
        plan += [(None, rng.randint(1, 50), rng.choice((1, 2, 4)))
                 for _ in range(RUNS - study_runs - len(plan))]  # fmt: skip
        for i, (s, seed, workers) in enumerate(plan):
            task = s.settings["task"] if s is not None else list(TASKS)[i % len(TASKS)]
            goal = catalogue.get(task).goal("light").value
            lift = rng.uniform(-0.15, 0.1)
            curve = [round(min(0.99, goal - 0.1 + lift + 0.05 * e), 4) for e in range(EVALS)]
            state = rng.choices([Run.FINISHED, Run.FAILED, Run.CANCELLED], [90, 7, 3])[0]
            synthetic = rng.random() < 0.2
            runs.append(Run(
                name=f"run {i}", task=task, target="light", seed=seed, num_workers=workers,
                series=s, state=state, started_at=ended - dt.timedelta(minutes=10),
                finished_at=ended,
                dataset="synthetic" if synthetic else "auto",
                dataset_used="synthetic" if synthetic else TASKS[task],
                reason="rank 1 exited with code 137" if state == Run.FAILED else "",
                summary=_summary(task, seed, workers, curve, goal) if state == Run.FINISHED else {},
            ))  # fmt: skip
            curves[i] = curve
        Run.objects.bulk_create(runs, batch_size=2000)
        ids = [r.pk for r in runs]
        # The imported: the last IMPORTED_SERIES series and lone runs up to IMPORTED, from a
        # trusted installation and from one this installation does not trust.
        chosen = [r for r in runs if r.series_id in {s.pk for s in series[-IMPORTED_SERIES:]}]
        chosen += [r for r in runs if r.series_id is None][: IMPORTED - len(chosen)]
        bundles = []
        for b in range(20):
            key = trusted if b % 2 == 0 else stranger
            bundles.append(ImportedBundle(
                digest=f"{b:064x}", format_version=1, origin_key=key,
                origin_fingerprint=signing.fingerprint(key), imported_by=user,
                manifest={"bench": True},
            ))  # fmt: skip
        ImportedBundle.objects.bulk_create(bundles)
        for n, run in enumerate(chosen):
            bundle = bundles[n % len(bundles)]
            origins.append(RunOrigin(
                run=run, bundle=bundle, origin_key=bundle.origin_key,
                origin_fingerprint=bundle.origin_fingerprint, origin_run=100_000 + n,
                origin_series=run.series_id,
            ))  # fmt: skip
        RunOrigin.objects.bulk_create(origins, batch_size=2000)
    points = _fill_points(db_url, runs, curves, rng)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    return {
        "runs": Run.objects.count(),
        "series": Series.objects.count(),
        "board_series": SERIES,
        "imported_runs": len(origins),
        "study_runs": study_runs,
        "metric_points": points,
        "first_run": start + 1,
        "run_ids": ids,
    }


def _fill_points(db_url: str, runs: list, curves: dict, rng: random.Random) -> int:
    """The training curves by PostgreSQL (INSERT ... SELECT generate_series), the evaluations
    and their grades by COPY: every other finished run graded by the evaluator."""
    import psycopg

    from mlbench_worker.shared import catalogue
    from mlbench_worker.shared.evaluation import graded_name

    first, last = min(r.pk for r in runs), max(r.pk for r in runs)
    throughput = " ".join(f"WHEN '{t}' THEN '{catalogue.get(t).throughput_metric}'" for t in TASKS)
    names = "ARRAY[" + ",".join(f"'{n}'" for n in TRAINING) + "]"
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO api_metric (run_id, pod_name, name, value, date, cumulative, metadata, uid) "
            "SELECT r.id, NULL, n.name, random(), timestamptz '2026-01-01' + i * interval '30 seconds', "
            "false, jsonb_build_object('step', i * 50, 'epoch', i / 4.0, 'elapsed', i * 30.0), NULL "
            f"FROM api_run r, generate_series(1, {REPORTS}) AS i, "
            f"unnest({names} || (CASE r.task {throughput} END)::text) AS n(name) "
            "WHERE r.id BETWEEN %s AND %s AND r.state <> 'QUEUED'",
            (first, last),
        )  # fmt: skip
        rows = io.StringIO()
        for i, run in enumerate(runs):
            graded = run.state == "FINISHED" and i % 2 == 0
            for e, acc in enumerate(curves[i]):
                meta = (
                    f'{{"step": {(e + 1) * 200}, "epoch": {e + 1}.0, "elapsed": {_eval_clock(e)}}}'
                )
                date = f"2026-01-01 00:{e + 1:02d}:00+00"
                rows.write(f"{run.pk}\tval_accuracy\t{acc}\t{date}\tf\t{meta}\n")
                if graded:
                    grade = round(acc + rng.uniform(-0.002, 0.002), 4)
                    name = graded_name("val_accuracy")
                    rows.write(f"{run.pk}\t{name}\t{grade}\t{date}\tf\t{meta}\n")
            reached = (run.summary or {}).get("time_to_target")
            if reached is not None:
                meta = f'{{"elapsed": {reached}}}'
                rows.write(
                    f"{run.pk}\ttime_to_target\t{reached}\t2026-01-01 00:09:00+00\tf\t{meta}\n"
                )
        columns = "run_id, name, value, date, cumulative, metadata"
        with conn.cursor().copy(f"COPY api_metric ({columns}) FROM STDIN") as copy:
            copy.write(rows.getvalue())
        return conn.execute("SELECT count(*) FROM api_metric").fetchone()[0]


def make_studies(user: object) -> int:
    """The studies, made by the master's own study code (its cells' series and runs), then
    every run ended an hour before now and graded reaching its target; their run count."""
    import datetime as dt

    from django.db import connection
    from django.utils import timezone

    from mlbench_master.api.models import Run, StudyCell
    from mlbench_master.studies import store
    from mlbench_worker.shared.evaluation import graded_name
    from mlbench_worker.shared.host_cpu import cpu_model

    total = 0
    for body in STUDIES:  # each ended before the next is made: later ones reuse its cells
        made = store.create_study(body, user)
        series = StudyCell.objects.filter(study=made).values_list("series_id", flat=True)
        runs = list(Run.objects.filter(series_id__in=list(series)).exclude(state=Run.FINISHED))
        ago = timezone.now() - dt.timedelta(hours=1)
        for run in runs:
            run.state, run.started_at, run.finished_at = Run.FINISHED, ago, ago
            run.summary = {"reached": True, "epochs": 2.0, "hardware": {"cpu_model": cpu_model()}}
        Run.objects.bulk_update(runs, ["state", "started_at", "finished_at", "summary"])
        total += len(runs)
        with connection.cursor() as cursor:
            for name in ("val_accuracy", graded_name("val_accuracy")):
                cursor.execute(
                    "INSERT INTO api_metric (run_id, name, value, date, cumulative, metadata) "
                    "SELECT r.id, %s, 0.95, now(), false, jsonb_build_object('step', 16, "
                    "'epoch', 1.0, 'elapsed', 1.0 + r.id %% 7) FROM api_run r WHERE r.id = ANY(%s)",
                    (name, [r.pk for r in runs]),
                )  # fmt: skip
    return total
