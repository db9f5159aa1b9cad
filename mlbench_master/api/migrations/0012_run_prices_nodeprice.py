"""The price table (NodePrice) and the copy of it each run keeps (Run.prices). Runs made
before keep {}: their prices were never recorded, so they are not priced."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("api", "0011_run_lr_schedule")]

    operations = [
        migrations.AddField(
            model_name="run",
            name="prices",
            field=models.JSONField(blank=True, default=dict, editable=False),
        ),
        migrations.CreateModel(
            name="NodePrice",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "node_kind",
                    models.CharField(
                        help_text="a node name, machine type, Slurm partition or cluster kind",
                        max_length=253,
                    ),
                ),
                (
                    "pricing",
                    models.CharField(
                        choices=[("on-demand", "on-demand"), ("preemptible", "preemptible")],
                        default="on-demand",
                        max_length=16,
                    ),
                ),
                ("price_per_hour", models.DecimalField(decimal_places=6, max_digits=14)),
                ("currency", models.CharField(help_text="ISO 4217 code, e.g. USD", max_length=3)),
                (
                    "source",
                    models.CharField(help_text="where the price comes from", max_length=500),
                ),
                ("as_of", models.DateField(help_text="the date the source gave this price")),
                ("updated_at", models.DateTimeField(auto_now=True)),
            ],
            options={"ordering": ["node_kind", "pricing"]},
        ),
        migrations.AddConstraint(
            model_name="nodeprice",
            constraint=models.UniqueConstraint(
                fields=("node_kind", "pricing"), name="nodeprice_kind_pricing"
            ),
        ),
    ]
