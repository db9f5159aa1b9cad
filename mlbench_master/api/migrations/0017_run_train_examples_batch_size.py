"""A run's training set size and batch per worker (issue 45: an algorithm study sizes its
workloads and draws held-out variants with them); null for every run before: the task's."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("api", "0016_run_algorithm_source")]

    operations = [
        migrations.AddField(
            model_name="run",
            name="train_examples",
            field=models.PositiveIntegerField(
                blank=True, help_text="training examples; null: the data set's whole set", null=True
            ),
        ),
        migrations.AddField(
            model_name="run",
            name="batch_size",
            field=models.PositiveIntegerField(
                blank=True, help_text="batch per worker; null: the task's", null=True
            ),
        ),
    ]
