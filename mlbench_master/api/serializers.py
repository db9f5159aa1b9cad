"""Request validation and response shapes for runs, pods and logs.

Metric points are validated by `ingest.py` instead: a batch of 10,000 points through DRF
serializers would cost seconds, a plain loop costs milliseconds.
"""

from __future__ import annotations

import json
from typing import Any

from rest_framework import serializers

from mlbench_master import run_rules
from mlbench_master.api.models import LogChunk, Pod, Run
from mlbench_master.api.plain_fields import PlainFieldsMixin
from mlbench_master.bundles import origins
from mlbench_master.results import stored
from mlbench_master.results.cost import of_run as cost_of_run
from mlbench_master.runs.run_queue import queue_position
from mlbench_worker.shared import algorithm_catalogue, result

RUN_OUTPUT_FIELDS = [
    "id", "name", "created_at", "state", "job_id", "job_metadata",
    "started_at", "finished_at", "reason", "task", "algorithm", "algorithm_options",
    "algorithm_source", "implementation", "backend", "num_workers", "num_cpus", "max_bandwidth",
    "latency", "gpu_enabled",
    "light_target", "target", "time_budget", "effective_time_budget", "time_budget_source",
    "max_epochs", "dataset", "dataset_used", "image",
    "custom_image_name", "custom_image_command", "custom_backend", "run_all_nodes",
    "time_limit", "resumed_from", "exit_code", "summary", "manifest", "created_by",
    "seed", "lr_schedule", "test_examples", "train_examples", "batch_size", "series", "queue_position", "evaluation", "cost",
    "origin", "division", "warnings",
]  # fmt: skip


# The built-ins named from the algorithm catalogue, so a new one is never left out.
ALGORITHM_HELP = (
    "how ranks combine their work: "
    + ", ".join(
        name + (" (default)" if name == algorithm_catalogue.DEFAULT_ALGORITHM else "")
        for name in algorithm_catalogue.ALGORITHMS
    )
    + " (those the task admits: GET /api/runs/defaults/); an uploaded algorithm's NAME (or "
    "leave it out with algorithm_source); an installed one's module path, package.module "
    "(staff only; checked by the worker at start-up)"
)

EVALUATION_HELP = (
    "who graded the run: status 'evaluated' (the platform's evaluator graded its predictions; "
    "its grades are the run's accuracy), 'self-reported, not evaluated' (only the run's own "
    "numbers), or '' (no accuracy yet); grades: evaluations graded; mismatches: the "
    "evaluations whose own accuracy differs from the grade by more than tolerance, with both "
    "numbers; where evaluated, the run's time_to_target, accuracy_after_time and its elapsed "
    "by the grades; audit: the ONNX audit of the run's final model (status matches, "
    "mismatch, pending, refused, not audited or no model; examples, sample, differ, "
    "first_rows, why)"
)


COST_HELP = (
    "what the run cost, with the prices it copied from the price table when it was created: "
    "priced (false: reason says why, e.g. 'not priced: the price table was empty when the run "
    "was created'; never 0), currency, per_hour (its nodes together), nodes (each with its "
    "kind, pricing, price_per_hour, source, as_of and workers), prices_taken_at, to_target "
    "{seconds, cost} (the time to target on the benchmark clock) and whole_run {seconds, "
    "cost} (start to end); null where there is no such time, and notes say why"
)


class RunSerializer(PlainFieldsMixin, serializers.ModelSerializer):
    """A run as the API shows it (the seed's fields first, then everything else).

    `time_budget` is what was asked for (null: none); `effective_time_budget` is what the
    worker trains for and `time_budget_source` where that comes from. `resumed_from` names the run whose checkpoint this one continued,
    so its result is never taken for one trained from scratch.
    """

    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    effective_time_budget = serializers.SerializerMethodField(
        help_text="seconds of training the worker gets: time_budget, else the task's "
        "(null for a custom command)"
    )

    time_budget_source = serializers.SerializerMethodField(
        help_text="where effective_time_budget comes from: asked (time_budget), task (the "
        "task's budget), time_limit (what fits in the time limit, shorter than the task's), "
        "or empty (a custom command has none)"
    )

    queue_position = serializers.SerializerMethodField(
        help_text="a QUEUED run's place in the master's queue (1: it starts when the active "
        "run ends); null for any other run"
    )

    evaluation = serializers.SerializerMethodField(help_text=EVALUATION_HELP)
    division = serializers.CharField(
        read_only=True,
        help_text="where the run's results compare: 'closed' (the reference worker, its "
        "algorithm run with the paper's recipe: the catalogue's defaults) or 'open' (a custom "
        "command, or algorithm options changed from the recipe)",
    )

    cost = serializers.SerializerMethodField(help_text=COST_HELP)
    origin = serializers.SerializerMethodField(help_text=origins.ORIGIN_HELP)
    warnings = serializers.SerializerMethodField(
        help_text="what to know before reading the run's numbers, in words; accepted, not "
        "refused. Today: more torch threads (workers × CPUs) than the cores the local "
        "machine's workers share. [] when none (and for a run imported from another master)"
    )

    def get_evaluation(self, run: Run) -> dict[str, Any]:
        listed = self.parent.instance if self.parent is not None else ()
        return stored.evaluation_of(run, self.context, listed or ())

    def get_cost(self, run: Run) -> dict[str, Any]:
        listed = self.parent.instance if self.parent is not None else ()
        return cost_of_run(stored.graded_run(run, self.context, listed or ()))

    def get_origin(self, run: Run) -> dict[str, Any] | None:
        return origins.of_run(run)

    def get_warnings(self, run: Run) -> list[str]:
        if hasattr(run, "origin"):  # imported: it ran on another master's machine
            return []
        if "machine_cores" not in self.context:  # asked once for a list of runs
            self.context["machine_cores"] = run_rules.machine_cores()
        return run_rules.run_warnings(run, self.context["machine_cores"])

    def get_queue_position(self, run: Run) -> int | None:
        return queue_position(run, self.context)

    def get_effective_time_budget(self, run: Run) -> float | None:
        return run_rules.effective_time_budget(run)

    def get_time_budget_source(self, run: Run) -> str:
        return run_rules.time_budget_source(run)

    class Meta:
        model = Run
        fields = RUN_OUTPUT_FIELDS
        read_only_fields = RUN_OUTPUT_FIELDS


class RunCreateSerializer(serializers.Serializer):
    """POST /api/runs/: the seed client's create_run fields plus this platform's additions.

    Parsing only: types, unknown fields, and null as "not given" (the seed client sends None
    for unset options). What the values may be and what a field left out becomes are the
    run rules' (mlbench_master/run_rules/), served at GET /api/runs/defaults/.
    """

    name = serializers.CharField(max_length=200)
    num_workers = serializers.IntegerField(required=False, allow_null=True)
    num_cpus = serializers.FloatField(required=False, allow_null=True)
    max_bandwidth = serializers.IntegerField(required=False, allow_null=True)
    latency = serializers.FloatField(required=False, allow_null=True)
    image = serializers.CharField(max_length=300, required=False, allow_null=True, allow_blank=True)
    # The original client's name for `image` (what its create_run sends).
    image_name = serializers.CharField(
        max_length=300, required=False, allow_null=True, allow_blank=True
    )
    backend = serializers.CharField(max_length=32, required=False, allow_null=True)
    custom_image_name = serializers.CharField(
        max_length=300, required=False, allow_null=True, allow_blank=True
    )
    custom_image_command = serializers.CharField(required=False, allow_null=True, allow_blank=True)
    custom_backend = serializers.CharField(
        max_length=100, required=False, allow_null=True, allow_blank=True
    )
    run_all_nodes = serializers.BooleanField(required=False, allow_null=True)
    gpu_enabled = serializers.BooleanField(required=False, allow_null=True)
    light_target = serializers.BooleanField(required=False, allow_null=True)
    task = serializers.CharField(max_length=100, required=False, allow_null=True)
    time_limit = serializers.IntegerField(required=False, allow_null=True)
    target = serializers.CharField(max_length=16, required=False, allow_null=True)
    time_budget = serializers.FloatField(required=False, allow_null=True)
    max_epochs = serializers.IntegerField(required=False, allow_null=True)
    dataset = serializers.CharField(max_length=16, required=False, allow_null=True)
    test_examples = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="how many test examples (task 3: validation tokens) the run is graded on, "
        "fixed now and held against every file it posts; left out: the task's whole test "
        "set, what a published result uses (an open-division command that evaluates on "
        "fewer must say how many here)",
    )
    train_examples = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="how many training examples (task 3: tokens) the reference worker trains "
        "on; left out: the data set's whole training set",
    )
    batch_size = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="the batch per worker; left out: the task's own",
    )
    algorithm = serializers.CharField(
        max_length=200,
        required=False,
        allow_null=True,
        help_text=ALGORITHM_HELP,
    )
    algorithm_source = serializers.CharField(
        max_length=64,
        required=False,
        allow_null=True,
        allow_blank=True,  # blank is left out, as a form sends it
        help_text="the SHA-256 POST /api/algorithms/ answered for an uploaded algorithm: the "
        "run trains with that file (open division); its options are the file's OPTIONS",
    )
    algorithm_options = serializers.JSONField(
        required=False,
        allow_null=True,
        help_text='the algorithm\'s options, e.g. {"rank": 4}; the ones left out are its defaults',
    )
    implementation = serializers.CharField(
        max_length=32,
        required=False,
        allow_null=True,
        allow_blank=True,  # blank is left out, as a form sends it
        help_text="which code trains: reference (our loop, default), torch-ddp (PyTorch "
        "DistributedDataParallel), tensorflow (Keras, MultiWorkerMirroredStrategy), spark (task "
        "2 on a Spark standalone cluster: SGD, or MLlib's L-BFGS as algorithm lbfgs), flink "
        "(task 2 on a Flink standalone cluster: SGD in a PyFlink streaming job); those the task "
        "has",
    )
    lr_schedule = serializers.CharField(
        max_length=100,
        required=False,
        allow_null=True,
        allow_blank=True,
        help_text="task 1b only: the learning-rate schedule after the warm-up, step (the "
        "default), cosine or poly (MLPerf's closed ResNet schedule: the one whose MLPerf log "
        "passes the closed rules); empty or left out: the task's default",
    )
    resume_from = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="id of a FAILED or CANCELLED run: continue from its last checkpoint; the "
        "fields left out are that run's",
    )
    seed = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text=f"the seed every rank starts from (0 to {run_rules.MAX_SEED}; default "
        f"{run_rules.DEFAULTS['seed']}): the same seed gives the same curve, another seed "
        "another one",
    )
    queue = serializers.BooleanField(
        required=False,
        allow_null=True,
        help_text="true: while a run is active (or runs are queued), wait in the master's "
        "queue (state QUEUED) instead of a 409",
    )

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError(
                    {k: [f"unknown field; allowed: {', '.join(self.fields)}"] for k in unknown}
                )
        values = super().to_internal_value(data)
        options = values.get("algorithm_options")
        if isinstance(options, str):  # a form body carries the object as JSON text
            try:
                options = values["algorithm_options"] = json.loads(options) if options else None
            except ValueError:
                options = "not JSON"
        if options is not None and not isinstance(options, dict):
            raise serializers.ValidationError(
                {"algorithm_options": ['an object of option: value, e.g. {"rank": 4}']}
            )
        return {k: v for k, v in values.items() if v is not None and v != ""}


class RunDefaultsSerializer(serializers.Serializer):
    """GET /api/runs/defaults/: what a run gets for each field it leaves out."""

    defaults = serializers.DictField(help_text="field -> the value a run gets without it")
    limits = serializers.DictField(help_text="the operator's limits (MLBENCH_MAX_*)")
    time_limit_margin = serializers.IntegerField(
        help_text="seconds a time limit must leave beyond the time budget"
    )
    open_division_time_limit = serializers.IntegerField(
        help_text="the time limit of a custom command that gives none"
    )
    tasks = serializers.DictField(
        help_text="task -> its backend, target, goals, data sets, time budget and time limit "
        "without options, the algorithms, implementations and learning-rate schedules "
        "(lr_schedules, the first the default; empty: none to choose) it admits, and whether "
        "it is a measurement (measurement: true; it refuses the training_only fields)"
    )
    lr_schedules = serializers.DictField(
        help_text="task -> the lr_schedule values it takes (the first its default), for the "
        "offered tasks that have any"
    )
    algorithms = serializers.DictField(
        help_text="algorithm -> title, paper, summary, reference (the code it follows), "
        "recipe (its paper's settings that are its defaults, cited) and options (name, type, "
        "default, help, bounds, choices); algorithm_options {} means these defaults"
    )
    implementations = serializers.DictField(
        help_text="implementation -> title, framework, summary, the algorithms and backends "
        "it runs (empty: all), the offered tasks that have it, whether this master's workers "
        "can import its framework (available: true, false, or null when the driver cannot "
        "tell), how to install it where they cannot, and per device (cpu, gpu) the backends "
        "a run of it may ask for (backend_choices; empty: it takes none, exchanging with its "
        "framework's own collective ops) and the one it gets without asking (default_backend)"
    )
    backends = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        help_text="the backends a run may ask for without GPUs (cpu) and with GPUs (gpu); what "
        "a measurement measures when it is given none",
    )
    training_only = serializers.ListField(
        child=serializers.CharField(),
        help_text="the fields only a training run takes: a measurement refuses each (dataset "
        "'auto' and light_target false excepted)",
    )
    run_states = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        help_text="run states by what they mean: active (holding the workers), final (the "
        "run will not change again) and resumable (a run in one may be continued with "
        "resume_from)",
    )


class PodSerializer(serializers.ModelSerializer):
    class Meta:
        model = Pod
        fields = ["name", "labels", "phase", "ip", "node", "last_seen"]


class LogChunkSerializer(serializers.ModelSerializer):
    rank = serializers.IntegerField(allow_null=True, help_text="null: mpirun itself")

    class Meta:
        model = LogChunk
        fields = ["seq", "rank", "stream", "text", "created_at"]


class RunSummarySerializer(serializers.Serializer):
    """The worker's end-of-run summary: a JSON object that fits the summary record of the
    run's task (mlbench_worker/shared/result.py; give the task as context["task"]), every
    field that does not fit named with why."""

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        wrong = result.problems(data, self.context.get("task"))
        if wrong:
            raise serializers.ValidationError({field: [why] for field, why in wrong.items()})
        dataset = data.get("dataset")
        if dataset is not None and len(dataset) > 32:
            raise serializers.ValidationError(
                {"dataset": ["dataset must be the name of the data used, e.g. 'cifar10'"]}
            )
        return data


# --- Shapes used only to document the API (OpenAPI) ---------------------------------------


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField(help_text="one sentence naming the field and the problem")
    errors = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        required=False,
        help_text="invalid input only: field name → messages",
    )


class MetricPointInSerializer(serializers.Serializer):
    pod_name = serializers.CharField(required=False, help_text="exclusive with run_id")
    run_id = serializers.IntegerField(required=False, help_text="exclusive with pod_name")
    name = serializers.CharField()
    value = serializers.FloatField(help_text="a finite number (numeric strings accepted)")
    date = serializers.DateTimeField(required=False, help_text="ISO 8601; default: now")
    cumulative = serializers.BooleanField(required=False, default=False)
    metadata = serializers.JSONField(required=False)
    uid = serializers.CharField(
        required=False, help_text="unique id: a repeated uid is stored once"
    )


class MetricBatchResultSerializer(serializers.Serializer):
    received = serializers.IntegerField(help_text="points accepted (repeated uids stored once)")


class LogPageSerializer(serializers.Serializer):
    run_id = serializers.IntegerField()
    offset = serializers.IntegerField()
    next_offset = serializers.IntegerField(help_text="pass as ?offset= to get what follows")
    truncated = serializers.BooleanField(
        help_text="older chunks were dropped to keep the log within MLBENCH_LOG_MAX_BYTES"
    )
    chunks = LogChunkSerializer(many=True)
