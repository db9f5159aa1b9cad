"""Runs record their learning-rate schedule (task 1b's --lr-schedule). Task-1b runs made
before it trained with their task's default, step, the only schedule the platform could
run then, and say so; other runs get "" (no choice of schedule)."""

from django.db import migrations, models

# The task-1b names when this migration was written (mlbench_worker/shared/catalogue.py); a
# migration must not follow later changes of the catalogue.
TASK_1B = ["resnet18-imagenet", "resnet34-imagenet", "resnet50-imagenet", "resnet101-imagenet"]


def step_for_earlier_1b_runs(apps, schema_editor):  # noqa: ANN001
    apps.get_model("api", "Run").objects.filter(task__in=TASK_1B).update(lr_schedule="step")


class Migration(migrations.Migration):
    dependencies = [("api", "0010_run_seed_series")]

    operations = [
        migrations.AddField(
            model_name="run",
            name="lr_schedule",
            field=models.CharField(blank=True, default="", max_length=16),
        ),
        migrations.RunPython(step_for_earlier_1b_runs, migrations.RunPython.noop),
    ]
