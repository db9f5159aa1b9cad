"""The kept results of runs and board entries (results/models.py says why), and the
PostgreSQL triggers that keep them exact: every change to what a run's result is made of
raises the run's `StoredResult.version` in the writer's own transaction, whoever writes.

- a run stored (api_run INSERT): its row, at version 1 (or raised, where one was left);
- a run's row changed (api_run UPDATE: its state, end, summary, series, fields): raised
  for the runs whose row really changed;
- its metric points stored, changed or removed (api_metric, any statement): raised for
  their runs (a pod's points have none);
- its origin stored, changed (the re-grade's verdict) or removed (api_runorigin).

Rows are locked in run order before they are raised, so two statements that touch the
same runs cannot deadlock. Nothing is inserted for a point, only raised: a run's row is made
with the run (and here for the runs stored before), so a run being deleted is never given a
row again. PostgreSQL only, as the rollup trigger is; SQLite keeps nothing
(results/kept_runs.py computes every read there).
"""

import django.db.models.deletion
from django.db import migrations, models

RAISE = """
    PERFORM 1 FROM api_storedresult WHERE run_id IN ({runs}) ORDER BY run_id FOR NO KEY UPDATE;
    UPDATE api_storedresult SET version = version + 1 WHERE run_id IN ({runs});
"""
POINTS = "SELECT DISTINCT run_id FROM {t} WHERE run_id IS NOT NULL"
TRIGGERS_SQL = f"""
CREATE OR REPLACE FUNCTION api_storedresult_runs_new() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO api_storedresult (run_id, version, made, code, body)
    SELECT id, 1, NULL, '', '' FROM new_rows ORDER BY id
    ON CONFLICT (run_id) DO UPDATE SET version = api_storedresult.version + 1;
    RETURN NULL;
END
$$;
CREATE TRIGGER api_run_stored_new AFTER INSERT ON api_run
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION api_storedresult_runs_new();

CREATE OR REPLACE FUNCTION api_storedresult_runs_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    {RAISE.format(runs="SELECT n.id FROM new_rows n JOIN old_rows o ON o.id = n.id WHERE n IS DISTINCT FROM o")}
    RETURN NULL;
END
$$;
CREATE TRIGGER api_run_stored_changed AFTER UPDATE ON api_run
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION api_storedresult_runs_changed();

CREATE OR REPLACE FUNCTION api_storedresult_points_new() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    {RAISE.format(runs=POINTS.format(t="new_rows"))}
    RETURN NULL;
END
$$;
CREATE TRIGGER api_metric_stored_new AFTER INSERT ON api_metric
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION api_storedresult_points_new();

CREATE OR REPLACE FUNCTION api_storedresult_points_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    {RAISE.format(runs=POINTS.format(t="new_rows") + " UNION " + POINTS.format(t="old_rows"))}
    RETURN NULL;
END
$$;
CREATE TRIGGER api_metric_stored_changed AFTER UPDATE ON api_metric
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION api_storedresult_points_changed();

CREATE OR REPLACE FUNCTION api_storedresult_points_gone() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    {RAISE.format(runs=POINTS.format(t="old_rows"))}
    RETURN NULL;
END
$$;
CREATE TRIGGER api_metric_stored_gone AFTER DELETE ON api_metric
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
    EXECUTE FUNCTION api_storedresult_points_gone();

CREATE OR REPLACE FUNCTION api_storedresult_origin() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        UPDATE api_storedresult SET version = version + 1 WHERE run_id = OLD.run_id;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        UPDATE api_storedresult SET version = version + 1 WHERE run_id = NEW.run_id;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER api_runorigin_stored AFTER INSERT OR UPDATE OR DELETE ON api_runorigin
    FOR EACH ROW EXECUTE FUNCTION api_storedresult_origin();

INSERT INTO api_storedresult (run_id, version, made, code, body)
    SELECT id, 1, NULL, '', '' FROM api_run ON CONFLICT (run_id) DO NOTHING;
"""
DROP_SQL = """
DROP TRIGGER IF EXISTS api_run_stored_new ON api_run;
DROP TRIGGER IF EXISTS api_run_stored_changed ON api_run;
DROP TRIGGER IF EXISTS api_metric_stored_new ON api_metric;
DROP TRIGGER IF EXISTS api_metric_stored_changed ON api_metric;
DROP TRIGGER IF EXISTS api_metric_stored_gone ON api_metric;
DROP TRIGGER IF EXISTS api_runorigin_stored ON api_runorigin;
DROP FUNCTION IF EXISTS api_storedresult_runs_new();
DROP FUNCTION IF EXISTS api_storedresult_runs_changed();
DROP FUNCTION IF EXISTS api_storedresult_points_new();
DROP FUNCTION IF EXISTS api_storedresult_points_changed();
DROP FUNCTION IF EXISTS api_storedresult_points_gone();
DROP FUNCTION IF EXISTS api_storedresult_origin();
"""


def add_triggers(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(TRIGGERS_SQL)


def drop_triggers(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP_SQL)


class Migration(migrations.Migration):
    dependencies = [
        ("api", "0021_logchunk_stored_to"),
    ]

    operations = [
        migrations.CreateModel(
            name="StoredResult",
            fields=[
                (
                    "run",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="stored_result",
                        serialize=False,
                        to="api.run",
                    ),
                ),
                ("version", models.BigIntegerField(default=1)),
                (
                    "made",
                    models.BigIntegerField(help_text="the version `body` was made at", null=True),
                ),
                (
                    "code",
                    models.CharField(default="", help_text="the code that made it", max_length=16),
                ),
                ("body", models.TextField(default="", help_text="the result, JSON")),
            ],
        ),
        migrations.CreateModel(
            name="StoredEntry",
            fields=[
                (
                    "key",
                    models.CharField(
                        help_text="the entry's id", max_length=80, primary_key=True, serialize=False
                    ),
                ),
                ("task", models.CharField(db_index=True, max_length=64)),
                (
                    "signature",
                    models.TextField(help_text="the code and its runs' ids and versions"),
                ),
                ("division", models.CharField(max_length=16)),
                ("measured", models.CharField(max_length=32)),
                ("data", models.CharField(max_length=16)),
                ("evaluation", models.CharField(max_length=16)),
                ("test_examples", models.BigIntegerField(null=True)),
                ("whole_test_set", models.BigIntegerField(null=True)),
                ("graded_on", models.TextField()),
                ("score", models.FloatField(null=True)),
                ("lower_is_better", models.BooleanField()),
                ("workers", models.IntegerField()),
                (
                    "unranked",
                    models.TextField(
                        help_text="why not ranked, trust aside ('' where it may rank)"
                    ),
                ),
                ("hardware", models.TextField()),
                ("algorithm", models.TextField()),
                ("implementation", models.TextField()),
                ("network", models.TextField()),
                ("backend", models.TextField()),
                ("seeds", models.TextField(help_text="the seeds, comma-separated")),
                (
                    "origin_key",
                    models.TextField(help_text="the origin's public key; '' for a local entry"),
                ),
                ("origin_fingerprint", models.TextField()),
                ("body", models.TextField(help_text="the rest of the entry, JSON")),
                (
                    "conv",
                    models.TextField(help_text="what its convergence check is made of, JSON"),
                ),
            ],
        ),
        migrations.RunPython(add_triggers, drop_triggers),
    ]
