from django.db import migrations, models


def every_earlier_run_was_the_reference(apps, schema_editor):
    """Runs stored before implementations were a dimension trained with our own loop; a
    measurement or a custom command trained with nothing of ours (as for `algorithm`)."""
    Run = apps.get_model("api", "Run")
    Run.objects.exclude(custom_image_command="").update(implementation="")
    Run.objects.filter(task="backend-benchmark").update(implementation="")


class Migration(migrations.Migration):
    dependencies = [
        ("api", "0008_run_algorithm"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="implementation",
            field=models.CharField(blank=True, default="reference", max_length=32),
        ),
        migrations.RunPython(every_earlier_run_was_the_reference, migrations.RunPython.noop),
    ]
