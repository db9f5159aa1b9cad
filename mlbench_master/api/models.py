"""The master's tables: runs, worker pods, metric points, run logs, where imported runs
come from, and the signing keys this installation trusts.
Over 400 lines: the app's tables stay in its one models module, as Django lays an app out.

Design points (see docs/api.rst and DESIGN.md "Lessons"):
- Metric values are floats, never text; a point belongs to exactly one of a run or a pod
  (a database constraint says so), and the pod is kept by NAME so its metrics outlive it.
- A metric may carry a client-made `uid`: a retried batch is stored once.
- Logs are append-only rows numbered per run (`seq`), so readers fetch only what is new.
- Run.state is changed only by `mlbench_master.runs.lifecycle`.
"""

from __future__ import annotations

import secrets

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from mlbench_master.results.models import StoredEntry, StoredResult  # noqa: F401  (kept results)
from mlbench_master.run_defaults import DEFAULT_TASK_TIME_LIMIT, DEFAULTS
from mlbench_worker.shared import algorithm_catalogue


def _token_salt() -> str:
    return secrets.token_hex(16)


class Run(models.Model):
    """One benchmark run: what was asked for, where it stands, and what came out."""

    QUEUED = "QUEUED"
    INITIALIZED = "INITIALIZED"
    STARTED = "STARTED"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    STATES = [
        (s, s.capitalize()) for s in (QUEUED, INITIALIZED, STARTED, FINISHED, FAILED, CANCELLED)
    ]
    # A QUEUED run waits its turn in the master's queue: neither active (it holds no
    # workers, so it does not count against the one-active-run rule) nor final.
    ACTIVE_STATES = (INITIALIZED, STARTED)
    FINAL_STATES = (FINISHED, FAILED, CANCELLED)

    BACKENDS = ["mpi", "gloo", "nccl"]

    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    state = models.CharField(max_length=16, choices=STATES, default=INITIALIZED, db_index=True)
    reason = models.TextField(blank=True, default="")
    job_id = models.CharField(max_length=100, blank=True, default="")
    job_metadata = models.JSONField(default=dict, blank=True)

    task = models.CharField(max_length=100, default=DEFAULTS["task"])
    backend = models.CharField(max_length=16, default=DEFAULTS["backend"])
    # How ranks combine their work (mlbench_worker/shared/algorithm_catalogue.py) and its options,
    # every default filled in; empty for a measurement or a custom command (no training of
    # ours to choose an algorithm for).
    # An outside algorithm is named by its declared NAME (with `algorithm_source`, the
    # SHA-256 of its uploaded file: runs/algorithm_files.py) or, installed on the workers,
    # by its module's dotted path, hence the length.
    algorithm = models.CharField(max_length=200, default=DEFAULTS["algorithm"], blank=True)
    algorithm_options = models.JSONField(default=dict, blank=True)
    algorithm_source = models.CharField(max_length=64, default="", blank=True)
    # Which code trains (mlbench_worker/shared/implementation_catalogue.py): our reference loop,
    # torch-ddp or tensorflow; empty where algorithm is (nothing of ours trains).
    implementation = models.CharField(max_length=32, default=DEFAULTS["implementation"], blank=True)
    # The learning-rate schedule asked for (the worker's --lr-schedule; the catalogue's
    # TaskInfo.lr_schedules say which tasks have one), stored as given: empty means the
    # task's default (task 1b: step), and is all a task without schedules may have.
    lr_schedule = models.CharField(max_length=16, default=DEFAULTS["lr_schedule"], blank=True)
    # Defaults for rows made in code: the table a run made through the API gets too
    # (mlbench_master/run_defaults.py, served as run_rules.DEFAULTS).
    num_workers = models.PositiveIntegerField(default=DEFAULTS["num_workers"])
    num_cpus = models.FloatField(default=DEFAULTS["num_cpus"])
    max_bandwidth = models.PositiveIntegerField(
        default=DEFAULTS["max_bandwidth"], help_text="mbit/s per worker"
    )
    latency = models.FloatField(
        null=True, blank=True, help_text="ms of delay added each way on every worker's link"
    )
    gpu_enabled = models.BooleanField(default=DEFAULTS["gpu_enabled"])
    light_target = models.BooleanField(default=DEFAULTS["light_target"])
    target = models.CharField(max_length=16, default=DEFAULTS["target"])
    time_budget = models.FloatField(null=True, blank=True, help_text="seconds of training")
    max_epochs = models.PositiveIntegerField(null=True, blank=True)
    dataset = models.CharField(max_length=16, default=DEFAULTS["dataset"], help_text="requested")
    dataset_used = models.CharField(max_length=32, blank=True, default="")
    image = models.CharField(max_length=300, blank=True, default="")
    custom_image_name = models.CharField(max_length=300, blank=True, default="")
    custom_image_command = models.TextField(blank=True, default="")
    custom_backend = models.CharField(max_length=100, blank=True, default="")
    run_all_nodes = models.BooleanField(default=DEFAULTS["run_all_nodes"])
    # The default task's budget (the seed's 2 hours) plus the margin (run_defaults.py).
    time_limit = models.PositiveIntegerField(default=DEFAULT_TASK_TIME_LIMIT, help_text="seconds")
    exit_code = models.IntegerField(null=True, blank=True)
    summary = models.JSONField(default=dict, blank=True)
    manifest = models.JSONField(default=dict, blank=True)
    # The seed every rank starts from (the worker's --seed); runs made before seeds were
    # chosen per run used the worker's default, the table's.
    seed = models.PositiveIntegerField(default=DEFAULTS["seed"])
    # The series this run belongs to, if any; a series' runs go when it is deleted.
    series = models.ForeignKey(
        "Series", null=True, blank=True, on_delete=models.CASCADE, related_name="runs"
    )
    # The run whose last checkpoint this one continued (manifest["resumed_from"] says from
    # which epoch). A plain id, not a foreign key: deleting the parent must not erase the
    # fact that this result did not start from scratch.
    resumed_from = models.PositiveIntegerField(
        null=True, blank=True, db_index=True, help_text="id of the run this one resumed"
    )

    # How many test examples the run is graded on (task 3: validation tokens), fixed when it
    # is created (run_rules/test_set.py) and enforced on every file it posts: null for the
    # task's whole test set of the data set it uses (and for a measurement, which has none).
    test_examples = models.PositiveIntegerField(
        null=True, blank=True, help_text="test examples graded on; null: the whole test set"
    )
    # The training set's size (task 3: tokens) and the batch per worker, when not the task's
    # own: an algorithm study sizes its workloads and draws its held-out variants with them
    # (run_rules/training_size.py). null: the task's.
    train_examples = models.PositiveIntegerField(
        null=True, blank=True, help_text="training examples; null: the data set's whole set"
    )
    batch_size = models.PositiveIntegerField(
        null=True, blank=True, help_text="batch per worker; null: the task's"
    )

    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    # Salt of the run's worker token (the token is an HMAC, never stored: see runs.py).
    token_salt = models.CharField(max_length=32, default=_token_salt, editable=False)
    # Bytes of log text stored for this run, kept to bound the log (MLBENCH_LOG_MAX_BYTES).
    log_bytes = models.BigIntegerField(default=0, editable=False)
    # The price table as it stood when the run was created (results/prices.py, set by
    # runs.new_run): its cost never follows a later change of the table. {}: made before
    # prices were kept.
    prices = models.JSONField(default=dict, blank=True, editable=False)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # At most one active run: two simultaneous POSTs cannot both start one.
            models.UniqueConstraint(
                models.Value(1),
                condition=Q(state__in=["INITIALIZED", "STARTED"]),
                name="run_one_active",
            ),
        ]

    def __str__(self) -> str:
        return f"Run {self.pk} {self.name!r} ({self.state})"

    @property
    def open_division(self) -> bool:
        """The user's own command instead of the reference worker (RunSpec's same rule)."""
        return bool((self.custom_image_command or "").strip())

    @property
    def division(self) -> str:
        """Where the run's results compare: "closed" for the reference worker running its
        algorithm with the paper's recipe (the catalogue's defaults), "open" for the user's
        own command or for an algorithm whose options were changed from the recipe."""
        if self.open_division:
            return "open"
        if self.algorithm and not algorithm_catalogue.follows_recipe(
            self.algorithm, self.algorithm_options
        ):
            return "open"
        return "closed"

    @property
    def is_active(self) -> bool:
        return self.state in self.ACTIVE_STATES


class Series(models.Model):
    """One benchmark repeated over seeds and/or worker counts; its runs are queued and run
    one after another, and its statistics are computed from their stored results."""

    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    seeds = models.JSONField(default=list, help_text="the seeds, in the order they run")
    worker_counts = models.JSONField(default=list, help_text="num_workers of its runs")
    # The run fields every run of the series shares (the request less seeds and workers).
    settings = models.JSONField(default=dict, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "series"

    def __str__(self) -> str:
        return f"Series {self.pk} {self.name!r}"


class Study(models.Model):
    """Algorithms compared over a suite's workloads and network conditions (issue 45,
    docs/studies.rst): each cell is a series (its seeds), scored from the evaluator's grades
    by mlbench_master.studies; written only there."""

    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    suite_version = models.CharField(max_length=16, help_text="study_suite.SUITE_VERSION")
    # [{"label", "algorithm", "options", "source"}]: fixed before any variant is drawn.
    algorithms = models.JSONField(default=list)
    workloads = models.JSONField(default=list)
    conditions = models.JSONField(default=list)
    seeds = models.JSONField(default=list)
    num_workers = models.PositiveIntegerField()
    num_cpus = models.FloatField(help_text="CPUs per worker, one for every run of the study")
    cluster = models.CharField(max_length=32, help_text="the driver its runs ran on")
    # The held-out draw: its seed (drawn by the master after the algorithms were fixed) and
    # each workload's variant as study_suite.draw_variant gave it; null/{}: no held-out.
    variant_seed = models.PositiveIntegerField(null=True, blank=True)
    variants = models.JSONField(default=dict, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)
    # For an imported study: where it came from (its id there, the signer's fingerprint).
    origin = models.JSONField(default=dict, blank=True)

    # What the study compared, and how: the fields its JSON, its bundle and the board give.
    SETUP = ("suite_version", "algorithms", "workloads", "conditions", "seeds", "num_workers",
             "num_cpus", "cluster")  # fmt: skip

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "studies"

    def setup(self) -> dict:
        return {name: getattr(self, name) for name in self.SETUP}


class StudyCell(models.Model):
    """One (algorithm, workload, condition) of a study, or a workload's held-out variant
    (`variant`, condition study_suite.HELD_OUT_CONDITION), and the series of its seeds:
    this study's own, or an earlier study's it reuses (`reused`)."""

    study = models.ForeignKey(Study, on_delete=models.CASCADE, related_name="cells")
    algorithm = models.CharField(max_length=300, help_text="the study's label of it")
    workload = models.CharField(max_length=100)
    condition = models.CharField(max_length=100)
    variant = models.BooleanField(default=False)
    series = models.ForeignKey(Series, null=True, on_delete=models.SET_NULL, related_name="+")
    reused = models.BooleanField(default=False)

    class Meta:
        ordering = ["id"]


class NodePrice(models.Model):
    """One line of the operator's price table: what an hour of one node of a kind costs.

    A run copies the whole table when it is created (Run.prices), so editing a line here
    changes the cost of the runs created after the edit only (docs/results.rst, "Cost").
    """

    ON_DEMAND = "on-demand"
    PREEMPTIBLE = "preemptible"
    PRICINGS = [(ON_DEMAND, "on-demand"), (PREEMPTIBLE, "preemptible")]

    node_kind = models.CharField(
        max_length=253, help_text="a node name, machine type, Slurm partition or cluster kind"
    )
    pricing = models.CharField(max_length=16, choices=PRICINGS, default=ON_DEMAND)
    price_per_hour = models.DecimalField(max_digits=14, decimal_places=6)
    currency = models.CharField(max_length=3, help_text="ISO 4217 code, e.g. USD")
    source = models.CharField(max_length=500, help_text="where the price comes from")
    as_of = models.DateField(help_text="the date the source gave this price")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["node_kind", "pricing"]
        constraints = [
            models.UniqueConstraint(fields=["node_kind", "pricing"], name="nodeprice_kind_pricing"),
        ]

    def __str__(self) -> str:
        return f"{self.node_kind} ({self.pricing}): {self.price_per_hour} {self.currency}/h"


class Pod(models.Model):
    """A worker slot as last seen by the cluster driver."""

    name = models.CharField(max_length=253, unique=True)
    labels = models.JSONField(default=dict, blank=True)
    phase = models.CharField(max_length=32, blank=True, default="")
    ip = models.CharField(max_length=64, blank=True, default="")
    node = models.CharField(max_length=253, blank=True, default="")
    last_seen = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Metric(models.Model):
    """One measured value of a run (training progress) or of a pod (resource use)."""

    # No database-level foreign key: its per-row check cost a third of the ingestion time.
    # The API checks the run exists before inserting, deleting a run deletes its metrics
    # (Django's cascade), and on PostgreSQL the rollup trigger's insert into MetricRollup,
    # whose foreign key IS checked, makes a batch for a just-deleted run fail as a whole.
    run = models.ForeignKey(
        Run,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="metrics",
        db_index=False,  # covered by the (run, name, date) index
        db_constraint=False,
    )
    pod_name = models.CharField(max_length=253, null=True, blank=True)
    name = models.CharField(max_length=200)
    value = models.FloatField()
    date = models.DateTimeField(default=timezone.now)
    cumulative = models.BooleanField(default=False)
    metadata = models.JSONField(default=dict, blank=True)
    # Unique by a constraint, not `unique=True`: on PostgreSQL that would also build a
    # second, LIKE-only index on it (varchar_pattern_ops) that no query uses, one index
    # update more per inserted point (migration 0020).
    uid = models.CharField(max_length=200, null=True, blank=True)

    class Meta:
        # Partial: a run's point is not entered in the pods' index and vice versa, one
        # index update less per inserted point.
        indexes = [
            models.Index(
                fields=["run", "name", "date"],
                name="metric_run_name_date",
                condition=Q(run__isnull=False),
            ),
            models.Index(
                fields=["pod_name", "name", "date"],
                name="metric_pod_name_date",
                condition=Q(pod_name__isnull=False),
            ),
        ]
        constraints = [
            models.UniqueConstraint(fields=["uid"], name="metric_uid_unique"),
            models.CheckConstraint(
                condition=(
                    Q(run__isnull=False, pod_name__isnull=True)
                    | Q(run__isnull=True, pod_name__isnull=False)
                ),
                name="metric_run_xor_pod",
            ),
        ]

    def __str__(self) -> str:
        owner = f"run {self.run_id}" if self.run_id else f"pod {self.pod_name}"
        return f"{owner} {self.name}={self.value} @ {self.date.isoformat()}"


class LogChunk(models.Model):
    """A piece of a run's output, numbered per run; appended, never edited."""

    STREAMS = [("stdout", "stdout"), ("stderr", "stderr")]

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="log_chunks")
    rank = models.IntegerField(null=True, blank=True)
    stream = models.CharField(max_length=6, choices=STREAMS, default="stdout")
    seq = models.BigIntegerField()
    text = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)
    # How far each launch's output is stored, {source: {stream: byte offset}}, kept on the
    # newest chunk of each write (runs/logs.py; migration 0021).
    stored_to = models.JSONField(null=True, blank=True, default=None)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["run", "seq"], name="logchunk_run_seq"),
        ]

    def __str__(self) -> str:
        return f"run {self.run_id} #{self.seq} rank {self.rank} {self.stream}"


class MetricRollup(models.Model):
    """Per-second sums of a run's metric points, kept by a PostgreSQL trigger on insert.

    `summarize=N` on a run with millions of points reads these (one row per metric per
    second) instead of every point, so it answers in milliseconds; each row also keeps its
    second's last point and that point's benchmark clock, which a bucket is placed at. The
    trigger (migrations 0002 and 0019) sees every insert, whichever code path makes it; on SQLite there is
    no trigger and summaries are computed from the points themselves, with the same result.
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+", db_index=False)
    name = models.CharField(max_length=200)
    second = models.BigIntegerField(help_text="floor of the Unix time of the points")
    count = models.BigIntegerField()
    total = models.FloatField()
    last_date = models.DateTimeField()
    # The second's last point (the newest date, the highest id among equal ones) and its
    # benchmark clock, so a bucket's clock needs no lookup of its point (migration 0019).
    last_id = models.BigIntegerField(null=True)
    last_clock = models.FloatField(null=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "name", "second"], name="rollup_run_name_sec"),
        ]


class ImportedBundle(models.Model):
    """A result bundle another installation signed, as this master verified and stored it
    (mlbench_master/bundles/; docs/publishing.rst). Its file is kept under
    MLBENCH_HOME/bundles/<digest>.zip, so its runs can be exported again with the origin's
    own signature."""

    digest = models.CharField(max_length=64, unique=True, help_text="SHA-256 of the file")
    format_version = models.PositiveIntegerField()
    origin_key = models.CharField(max_length=64, help_text="Ed25519 public key, base64")
    origin_fingerprint = models.CharField(max_length=32, db_index=True)
    exported_at = models.DateTimeField(null=True, blank=True)
    exported_by = models.CharField(max_length=200, blank=True, default="")
    imported_at = models.DateTimeField(default=timezone.now)
    imported_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    # The installations that handed it on, nearest first (a bundle carried inside another
    # installation's bundle): [{public_key, fingerprint, exported_at, exported_by}].
    received_via = models.JSONField(default=list, blank=True)
    manifest = models.JSONField(default=dict, help_text="the signed manifest, as verified")

    class Meta:
        ordering = ["-imported_at", "-id"]

    def __str__(self) -> str:
        return f"bundle {self.digest[:12]} from {self.origin_fingerprint}"


class RunOrigin(models.Model):
    """Where an imported run comes from. A run with one is read-only (runs.py): no driver
    touches it, and only staff may delete it. One row per origin run: the same run arriving
    again, in the same bundle or another, is stored once."""

    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="origin")
    bundle = models.ForeignKey(ImportedBundle, on_delete=models.PROTECT, related_name="runs")
    origin_key = models.CharField(max_length=64)
    origin_fingerprint = models.CharField(max_length=32, db_index=True)
    origin_run = models.PositiveBigIntegerField(help_text="the run's id at its origin")
    origin_series = models.PositiveBigIntegerField(null=True, blank=True)
    # This master's evaluator on the run's predictions, beside the origin's grades
    # (bundles/regrade.py): {status, why, steps: [{step, here, origin, agrees}], disagreements}.
    regrade = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["origin_key", "origin_run"], name="runorigin_once"),
        ]

    def __str__(self) -> str:
        return f"run {self.run_id} = run {self.origin_run} of {self.origin_fingerprint}"


class TrustedKey(models.Model):
    """An installation's signing key this master's operator trusts (bundles/trust.py, the
    only writer; docs/publishing.rst "Whose results rank"). An imported run ranks on the
    board only when its origin's key is this installation's own or one of these; trust is
    read from this table whenever a result is shown, so adding or removing a key changes
    what ranks at once, with nothing to re-mark. The fingerprint is computed here from the
    key (bundles/signing.py), never taken from a client."""

    public_key = models.CharField(
        max_length=64, unique=True, help_text="Ed25519 public key, base64"
    )
    fingerprint = models.CharField(max_length=32, unique=True)
    name = models.CharField(max_length=200, help_text="whose key it is, in the operator's words")
    added_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    added_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["added_at", "id"]

    def __str__(self) -> str:
        return f"trusted key {self.fingerprint} ({self.name})"
