"""Request validation and response shapes for runs, pods and logs.

Metric points are validated by `ingest.py` instead: a batch of 10,000 points through DRF
serializers would cost seconds, a plain loop costs milliseconds.
"""

from __future__ import annotations

import math
import shlex
from typing import Any

from django.conf import settings
from rest_framework import serializers

from mlbench_master import runs
from mlbench_master.api.models import LogChunk, Pod, Run
from mlbench_master.cluster.base import ClusterError
from mlbench_master.cluster.drivers import get_driver
from mlbench_worker import catalogue

RUN_OUTPUT_FIELDS = [
    "id", "name", "created_at", "state", "job_id", "job_metadata",
    "started_at", "finished_at", "reason", "task", "backend", "num_workers", "num_cpus",
    "max_bandwidth", "latency", "gpu_enabled", "light_target", "target", "time_budget",
    "effective_time_budget", "max_epochs", "dataset", "dataset_used", "image",
    "custom_image_name", "custom_image_command", "custom_backend", "run_all_nodes",
    "time_limit", "resumed_from", "exit_code", "summary", "manifest", "created_by",
]  # fmt: skip


class RunSerializer(serializers.ModelSerializer):
    """A run as the API shows it (the seed's fields first, then everything else).

    `time_budget` is what was asked for (null: the task's); `effective_time_budget` is what
    the worker trains for. `resumed_from` names the run whose checkpoint this one continued,
    so its result is never taken for one trained from scratch.
    """

    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    effective_time_budget = serializers.SerializerMethodField(
        help_text="seconds of training the worker gets: time_budget, else the task's "
        "(null for a custom command)"
    )

    def get_effective_time_budget(self, run: Run) -> float | None:
        return runs.effective_time_budget(run)

    class Meta:
        model = Run
        fields = RUN_OUTPUT_FIELDS
        read_only_fields = RUN_OUTPUT_FIELDS


def _range_error(field: str, low: str, high: str, setting: str | None) -> str:
    limit = f" (limit {setting})" if setting else ""
    return f"{field} must be between {low} and {high}{limit}"


class RunCreateSerializer(serializers.Serializer):
    """POST /api/runs/: the seed client's create_run fields plus task, time limits, target."""

    name = serializers.CharField(max_length=200)
    num_workers = serializers.IntegerField()
    num_cpus = serializers.FloatField(required=False)
    max_bandwidth = serializers.IntegerField(required=False)
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
    run_all_nodes = serializers.BooleanField(required=False)
    gpu_enabled = serializers.BooleanField(required=False)
    light_target = serializers.BooleanField(required=False)
    task = serializers.CharField(max_length=100, required=False, allow_null=True)
    time_limit = serializers.IntegerField(required=False, allow_null=True)
    target = serializers.CharField(max_length=16, required=False, allow_null=True)
    time_budget = serializers.FloatField(required=False, allow_null=True)
    max_epochs = serializers.IntegerField(required=False, allow_null=True)
    dataset = serializers.CharField(max_length=16, required=False, allow_null=True)
    resume_from = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="id of a FAILED or CANCELLED run: continue from its last checkpoint",
    )

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError(
                    {k: [f"unknown field; allowed: {', '.join(self.fields)}"] for k in unknown}
                )
        values = super().to_internal_value(data)
        # null means "the default" (the seed client sends None for unset options)
        return {k: v for k, v in values.items() if v is not None}

    def validate_num_workers(self, value: int) -> int:
        high = settings.MLBENCH_MAX_WORKERS
        if not 1 <= value <= high:
            raise serializers.ValidationError(
                _range_error("num_workers", "1", str(high), "MLBENCH_MAX_WORKERS")
            )
        # A cluster that cannot grow (the local one) refuses more ranks here, not later. A
        # driver that cannot even be set up is not the client's fault: the run's job fails
        # with the reason instead.
        try:
            driver = get_driver()
        except Exception:  # noqa: BLE001 - misconfigured master, said by the run's job
            return value
        try:
            driver.check_workers(value)
        except ClusterError as exc:
            raise serializers.ValidationError(str(exc)) from None
        return value

    def validate_num_cpus(self, value: float) -> float:
        high = settings.MLBENCH_MAX_CPUS
        if not math.isfinite(value) or not 0 < value <= high:
            raise serializers.ValidationError(
                _range_error("num_cpus", "more than 0", f"{high:g}", "MLBENCH_MAX_CPUS")
            )
        return value

    def validate_max_bandwidth(self, value: int) -> int:
        high = settings.MLBENCH_MAX_BANDWIDTH
        if not 1 <= value <= high:
            raise serializers.ValidationError(
                _range_error("max_bandwidth", "1", f"{high} mbit/s", "MLBENCH_MAX_BANDWIDTH")
            )
        return value

    def validate_latency(self, value: float | None) -> float | None:
        """Milliseconds added each way on every worker's link; 0 or none: no delay."""
        if value is None:
            return None
        high = settings.MLBENCH_MAX_LATENCY
        if not math.isfinite(value) or not 0 <= value <= high:
            raise serializers.ValidationError(
                _range_error("latency", "0", f"{high:g} ms", "MLBENCH_MAX_LATENCY")
            )
        return value or None

    def validate_time_limit(self, value: int | None) -> int | None:
        if value is None:
            return None
        high = settings.MLBENCH_MAX_TIME_LIMIT
        if not 1 <= value <= high:
            raise serializers.ValidationError(
                _range_error("time_limit", "1", f"{high} s", "MLBENCH_MAX_TIME_LIMIT")
            )
        return value

    def validate_time_budget(self, value: float | None) -> float | None:
        if value is None:
            return None
        if not math.isfinite(value) or value <= 0:
            raise serializers.ValidationError("time_budget must be a positive number of seconds")
        return value

    def validate_max_epochs(self, value: int | None) -> int | None:
        if value is None:
            return None
        if not 1 <= value <= 100000:
            raise serializers.ValidationError(_range_error("max_epochs", "1", "100000", None))
        return value

    def validate_backend(self, value: str | None) -> str | None:
        """Any case ("MPI" is the original client's spelling); stored lower-case."""
        if value is None:
            return None
        lowered = value.strip().lower()
        if lowered not in Run.BACKENDS and lowered != CUSTOM_BACKEND:
            raise serializers.ValidationError(
                f"backend {value!r} is not one of {', '.join(Run.BACKENDS)} (any case), "
                f"or {CUSTOM_BACKEND!r} with custom_backend for a custom image"
            )
        return lowered

    def validate_target(self, value: str | None) -> str | None:
        if value is None:
            return None
        if value not in catalogue.goal_names():
            raise serializers.ValidationError(
                f"target {value!r} is not one of {', '.join(catalogue.goal_names())}"
            )
        return value

    def validate_dataset(self, value: str | None) -> str | None:
        if value is None:
            return None
        if value not in catalogue.dataset_names():
            raise serializers.ValidationError(
                f"dataset {value!r} is not one of {', '.join(catalogue.dataset_names())}"
            )
        return value

    def validate_custom_image_command(self, value: str | None) -> str | None:
        """mpirun's argv is split from it with shlex (cluster/mpirun.py): refuse what it
        cannot split here, with a 400, instead of failing the run in its job."""
        if not value:
            return value
        try:
            shlex.split(value)
        except ValueError as exc:
            raise serializers.ValidationError(
                f"custom_image_command cannot be split into arguments like a shell would "
                f"({exc}): close every quote or escape it with a backslash"
            ) from exc
        return value

    def validate_task(self, value: str | None) -> str | None:
        if value is None:
            return None
        if value not in settings.MLBENCH_TASKS:
            raise serializers.ValidationError(
                f"task {value!r} is not known; known tasks: {', '.join(settings.MLBENCH_TASKS)} "
                "(MLBENCH_TASKS)"
            )
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        errors: dict[str, list[str]] = {}
        _resolve_image_and_backend(attrs, errors)
        if attrs.get("gpu_enabled") and settings.MLBENCH_MAX_GPUS < 1:
            errors["gpu_enabled"] = [
                "this cluster offers no GPUs (MLBENCH_MAX_GPUS=0); set gpu_enabled to false"
            ]
        if attrs.get("backend") == "nccl" and not attrs.get("gpu_enabled"):
            errors.setdefault("backend", []).append(
                "the nccl backend needs GPUs: set gpu_enabled to true or use mpi or gloo"
            )
        budget = _check_time(attrs, errors)
        if attrs.get("light_target") and attrs.get("target") not in (None, "light"):
            errors.setdefault("target", []).append(
                "light_target=true asks for target 'light'; do not also give another target"
            )
        # Each task has its own goals and data sets (the catalogue says which).
        task = catalogue.TASKS.get(attrs.get("task") or catalogue.DEFAULT_TASK)
        if task is not None and task.measurement and not attrs.get("custom_image_command"):
            _check_measurement(attrs, task, errors)
        elif task is not None and not errors.get("image_name"):
            target = attrs.get("target") or ("light" if attrs.get("light_target") else None)
            if target is not None and target not in task.goals:
                errors.setdefault("target", []).append(
                    f"task {task.name} has no goal {target!r}; its goals: {', '.join(task.goals)}"
                )
            dataset = attrs.get("dataset")
            if dataset is not None and dataset not in task.datasets:
                errors.setdefault("dataset", []).append(
                    f"task {task.name} runs on {', '.join(task.datasets)}, not {dataset!r}"
                )
        if attrs.get("resume_from") is not None and not errors:
            _check_resume(attrs, errors)
        if errors:
            raise serializers.ValidationError(errors)
        attrs.setdefault("time_limit", runs.default_time_limit(budget))
        return attrs


def _check_time(attrs: dict[str, Any], errors: dict[str, list[str]]) -> float | None:
    """The run's time budget (its own, else its task's) and its time limit agree.

    The limit is a hard stop that makes the run FAILED, so it must leave room for the whole
    budget plus runs.TIME_LIMIT_MARGIN (start-up and the final evaluation); otherwise a run
    that should end FINISHED with its accuracy after time would be killed first. Returns
    the budget the worker will get.
    """
    open_division = bool(attrs.get("custom_image_command"))
    if open_division and attrs.get("time_budget") is not None:
        errors.setdefault("time_budget", []).append(
            "time_budget applies to reference tasks: a custom command decides itself when it "
            "stops (give time_limit to bound it)"
        )
        return None
    budget = runs.time_budget_for(attrs.get("task"), attrs.get("time_budget"), open_division)
    if budget is None:
        return None
    needed = runs.minimum_time_limit(budget)
    whose = "" if attrs.get("time_budget") is not None else " (the task's, as none was given)"
    limit = attrs.get("time_limit")
    high = settings.MLBENCH_MAX_TIME_LIMIT
    if limit is None and needed > high:
        errors.setdefault("time_budget", []).append(
            f"time_budget {budget:g} s{whose} needs a time limit of at least {needed} s "
            f"(budget + {runs.TIME_LIMIT_MARGIN} s for start-up and the final evaluation), "
            f"more than this master allows (MLBENCH_MAX_TIME_LIMIT={high}); give a shorter "
            "time_budget"
        )
    elif limit is not None and limit < needed:
        errors.setdefault("time_limit", []).append(
            f"time_limit ({limit} s) must be at least time_budget {budget:g} s{whose} + "
            f"{runs.TIME_LIMIT_MARGIN} s for start-up and the final evaluation = {needed} s: "
            "the time limit stops the run as FAILED; give a longer time_limit, a shorter "
            "time_budget, or leave time_limit out"
        )
    return budget


def _check_measurement(
    attrs: dict[str, Any], task: catalogue.TaskInfo, errors: dict[str, list[str]]
) -> None:
    """A measurement task (the communication benchmark) trains nothing, so the training
    fields are refused by name, except the defaults clients send for every run (dataset
    "auto", light_target false). Its `backend` is the list of backends it measures: the one
    asked for, else every backend the run's device offers ("mpi,gloo", and nccl with GPUs),
    stored so the run says what it measured. Its time budget bounds the sweep."""
    why = f"task {task.name} measures communication"
    training = "leave it out"
    refused = {
        "target": (attrs.get("target") is not None, f"it has no accuracy goal; {training}"),
        "light_target": (bool(attrs.get("light_target")), "it has no accuracy goal"),
        "dataset": (attrs.get("dataset") not in (None, "auto"), f"it reads no data; {training}"),
        "max_epochs": (attrs.get("max_epochs") is not None, f"it has no epochs; {training}"),
        "resume_from": (attrs.get("resume_from") is not None, "it keeps no checkpoints"),
        "num_workers": (attrs.get("num_workers", 2) < 2, "it needs 2 workers or more"),
    }
    for name, (bad, reason) in refused.items():
        if bad:
            errors.setdefault(name, []).append(f"{why}: {reason}")
    attrs["target"] = ""
    if attrs.get("backend") is None:
        attrs["backend"] = "mpi,gloo,nccl" if attrs.get("gpu_enabled") else "mpi,gloo"


def _check_resume(attrs: dict[str, Any], errors: dict[str, list[str]]) -> None:
    """`resume_from` names a run whose checkpoint this run can continue (runs.resume_point)."""
    if attrs.get("custom_image_command"):
        errors.setdefault("resume_from", []).append(
            "a custom command cannot resume a checkpoint: resume_from is for reference tasks"
        )
        return
    try:
        runs.resume_point(
            attrs["resume_from"],
            task=attrs.get("task"),
            num_workers=attrs["num_workers"],
            dataset=attrs.get("dataset"),
        )
    except runs.ResumeRefused as exc:
        errors.setdefault("resume_from", []).append(str(exc))


CUSTOM_IMAGE = catalogue.CUSTOM_IMAGE
CUSTOM_BACKEND = catalogue.CUSTOM_BACKEND
CUSTOM_BACKEND_STORED = "custom"  # Run.backend of a run whose command picks its backend
LOCAL_IMAGE_REFUSED = (
    "the local cluster runs commands as processes on this machine, not containers, so it "
    "cannot run an image; leave custom_image_name empty and give custom_image_command "
    "(it runs here as is), or use a Kubernetes master"
)
CUSTOM_FIELDS = ("custom_image_name", "custom_image_command", "custom_backend")


def _resolve_image_and_backend(attrs: dict[str, Any], errors: dict[str, list[str]]) -> None:
    """Resolve `image`/`image_name`, the custom fields and the backend, in place.

    An official image of the original platform stands for the task that implements it
    here (the catalogue maps them, tag ignored). "custom_image" (or any custom field) is
    the open division: the user's command, and on Kubernetes their image. The two never
    mix: a reference task's result must come from the reference code, so custom fields
    with an official image are refused, and every open-division run names its command
    (an image alone would run the reference worker in the user's image). A custom
    backend only means something to the user's own code.
    """
    image, alias = attrs.pop("image", None), attrs.pop("image_name", None)
    if image and alias and image.strip() != alias.strip():
        errors.setdefault("image_name", []).append(
            f"image ({image!r}) and image_name ({alias!r}) name different images; give one"
        )
        return
    image = (alias or image or "").strip()
    custom = [f for f in CUSTOM_FIELDS if attrs.get(f)] + (
        ["backend"] if attrs.get("backend") == CUSTOM_BACKEND else []
    )
    if image and image != CUSTOM_IMAGE:
        attrs["image"] = image
        offered = list(settings.MLBENCH_TASKS)
        implemented = ", ".join(catalogue.implemented_images(offered))
        found = catalogue.seed_image(image)
        if found is None:
            errors.setdefault("image_name", []).append(
                f"{image!r} is not an official mlbench image; this master runs {implemented}, "
                f"or {CUSTOM_IMAGE!r} with custom_image_command for your own code"
            )
            return
        if found.task is None or found.task not in offered:
            errors.setdefault("image_name", []).append(
                f"{found.title} ({found.image}) is not implemented on this master yet; it runs "
                f"{implemented}"
            )
            return
        if custom:
            errors.setdefault(custom[0], []).append(
                f"{custom[0]} is for the open division (image_name {CUSTOM_IMAGE!r}); image_name "
                f"{image!r} runs the reference task {found.task}"
            )
            return
        if attrs.get("task") not in (None, found.task):
            errors.setdefault("task", []).append(
                f"image_name {image!r} runs task {found.task}, not {attrs['task']!r}; give one"
            )
        attrs["task"] = found.task
        return
    if image == CUSTOM_IMAGE:
        attrs["image"] = CUSTOM_IMAGE
    if (image == CUSTOM_IMAGE or custom) and not attrs.get("custom_image_command"):
        errors.setdefault("custom_image_command", []).append(
            "the open division needs custom_image_command: the command each worker runs"
        )
    if attrs.get("custom_image_name") and settings.MLBENCH_CLUSTER == "local":
        errors.setdefault("custom_image_name", []).append(LOCAL_IMAGE_REFUSED)
    backend, named = attrs.get("backend"), attrs.get("custom_backend")
    if backend == CUSTOM_BACKEND and not named:
        errors.setdefault("custom_backend", []).append(
            f"backend {CUSTOM_BACKEND!r} needs custom_backend: the backend's name"
        )
    elif named and backend not in (None, CUSTOM_BACKEND):
        errors.setdefault("backend", []).append(
            f"custom_backend {named!r} and backend {backend!r} disagree: set backend to "
            f"{CUSTOM_BACKEND!r} or leave it out"
        )
    elif named:
        attrs["backend"] = CUSTOM_BACKEND_STORED


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
    """The worker's end-of-run summary (a JSON object; `dataset` names the data used)."""

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise serializers.ValidationError({"": ["the summary must be a JSON object"]})
        dataset = data.get("dataset")
        if dataset is not None and (not isinstance(dataset, str) or len(dataset) > 32):
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


class MetricPointOutSerializer(serializers.Serializer):
    date = serializers.DateTimeField()
    value = serializers.FloatField()


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
