from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("api", "0013_imported_bundles_and_run_origins"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="test_examples",
            field=models.PositiveIntegerField(
                blank=True, help_text="test examples graded on; null: the whole test set", null=True
            ),
        ),
    ]
