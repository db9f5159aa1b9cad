"""The results kept in the database so that a read need not rebuild them: each run's
result (`StoredResult`) and each entry of the results board (`StoredEntry`), with what says
whether they still hold (docs/results.rst, "Pages of a large installation").

Why rows, and how they stay exact: the board of ten thousand runs rebuilt every run's result
and every entry's statistics on each request (tens of seconds). A kept row is only used
while it is current, and that is decided by the database, not by each writer remembering
to clear it: every run has a `StoredResult` row whose `version` PostgreSQL's triggers raise
in the same transaction as any change to what a result is made of (the run's row, its
metric points, its origin and re-grade: migration 0021), and `bump` raises it for the one
input kept outside the database (a model's audit record, grading/model_files.py). A result
is kept with the version it was made at (`made`) and is current while the two are equal;
an entry is kept with its runs' ids and versions (`signature`) and is current while they
are the same runs at the same versions. Rows made by other code are not current either
(`code`, results/kept_runs.py). What is read from elsewhere whenever a result is shown
(whose keys this installation trusts, its own key, the rank, the convergence check against
the reference series) is never kept.

The tables live in the api app (they hang on its runs) but are declared here, beside the
code that writes them; api/models.py imports this module so Django registers them. On a
database without the triggers (SQLite, the embedded master) nothing is kept: every read
computes (kept_runs.available).
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import connection, models


class StoredResult(models.Model):
    """One run's result as the statistics and the board read it (kept_runs.py writes it)."""

    run = models.OneToOneField(
        "api.Run", primary_key=True, on_delete=models.CASCADE, related_name="stored_result"
    )
    # Raised by the database with every change to what the run's result is made of.
    version = models.BigIntegerField(default=1)
    made = models.BigIntegerField(null=True, help_text="the version `body` was made at")
    code = models.CharField(max_length=16, default="", help_text="the code that made it")
    body = models.TextField(default="", help_text="the result, JSON")

    class Meta:
        app_label = "api"


class StoredEntry(models.Model):
    """One entry of the results board without what is read at each request (trust, rank,
    convergence): its section, filter and ranking fields as columns, the rest as JSON text
    (kept_entries.py writes it)."""

    key = models.CharField(max_length=80, primary_key=True, help_text="the entry's id")
    task = models.CharField(max_length=64, db_index=True)
    signature = models.TextField(help_text="the code and its runs' ids and versions")
    division = models.CharField(max_length=16)
    measured = models.CharField(max_length=32)
    data = models.CharField(max_length=16)
    evaluation = models.CharField(max_length=16)
    test_examples = models.BigIntegerField(null=True)
    whole_test_set = models.BigIntegerField(null=True)
    graded_on = models.TextField()
    score = models.FloatField(null=True)
    lower_is_better = models.BooleanField()
    workers = models.IntegerField()
    unranked = models.TextField(help_text="why not ranked, trust aside ('' where it may rank)")
    hardware = models.TextField()
    algorithm = models.TextField()
    implementation = models.TextField()
    network = models.TextField()
    backend = models.TextField()
    seeds = models.TextField(help_text="the seeds, comma-separated")
    origin_key = models.TextField(help_text="the origin's public key; '' for a local entry")
    origin_fingerprint = models.TextField()
    body = models.TextField(help_text="the rest of the entry, JSON")
    conv = models.TextField(help_text="what its convergence check is made of, JSON")

    class Meta:
        app_label = "api"


BUMP_SQL = "UPDATE api_storedresult SET version = version + 1 WHERE run_id = ANY(%s::bigint[])"


def bump(run_ids: Iterable[int]) -> None:
    """Mark the kept results of `run_ids` as no longer current: for a change the triggers
    cannot see (a file beside the database: a model's audit record, written by a background
    thread too, whose connection is closed again here). Nothing where nothing is kept."""
    ids = sorted({int(i) for i in run_ids})
    if not ids or connection.vendor != "postgresql":
        return
    opened = connection.connection is None
    try:
        with connection.cursor() as cursor:
            cursor.execute(BUMP_SQL, [ids])
    finally:
        if opened and not connection.in_atomic_block:
            connection.close()
