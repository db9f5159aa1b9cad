# Over 400 lines: the one declaration of the published record, every field with its meaning.
"""The record a run publishes, declared once: its summary's fields, their types, units and
meaning, for a training task and for a measurement task.

Why one declaration: the summary is the run's published result. Every implementation built
its own dict of some 25 keys by hand, the master read them ad hoc, and nothing said what a
summary must hold, so a summary from another implementation (or anyone's command with a run
token) could omit or mistype what the results are computed from. Now the ranks build it with
`training_summary` / `measurement_summary` (the one place its keys, order and derived values
are decided; every training implementation calls the first through
mlbench_worker/training/run_record.py, from its run configuration and what it measured),
the master refuses a summary that does not fit with the field named (`problems`), `mlbench_master/results/` reads it through the names declared here, and
docs/metrics.rst lists the same fields (tests/test_result_record.py holds the page to them).

Plain data and the standard library only: the master, the client and the ranks import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mlbench_worker.shared import catalogue

# A field's JSON type, and the Python types that carry it (bool is an int in Python, never a
# number here).
TYPES: dict[str, tuple[type, ...]] = {
    "text": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "list": (list,),
}
# The throughput field is named by the task (its catalogue entry's throughput_metric).
THROUGHPUT = "<throughput_metric>"


@dataclass(frozen=True)
class Field:
    name: str
    type: str  # a key of TYPES
    unit: str
    meaning: str
    nullable: bool = False  # null is a value it may have
    required: bool = True  # only some tasks or implementations have it when False

    def fits(self, value: Any) -> bool:
        if value is None:
            return self.nullable
        if isinstance(value, bool) and self.type != "boolean":
            return False
        return isinstance(value, TYPES[self.type])


def _f(name: str, type_: str, unit: str, meaning: str, **flags: bool) -> Field:
    return Field(name, type_, unit, meaning, **flags)


# Every entry of a training run's config, whatever its task; tasks add their own after these.
CONFIG_FIELDS: tuple[Field, ...] = (
    _f("batch_size", "integer", "per worker", "images or samples per worker and step"),
    _f("peak_lr", "number", "", "the learning rate after warm-up, scaled for the workers"),
    _f("max_epochs", "integer", "epochs", "the most epochs the run may train"),
    _f("time_budget", "number", "s", "training seconds it was given", nullable=True),
    _f("threads", "integer", "", "compute threads per rank"),
)

TRAINING_FIELDS: tuple[Field, ...] = (
    _f("task", "text", "", "the task's name in the catalogue, e.g. resnet20-cifar10"),
    _f("model", "text", "", "the model trained, e.g. resnet20"),
    _f("dataset", "text", "", "what was used: the real data set's name, or synthetic"),
    _f("num_workers", "integer", "ranks", "the number of ranks"),
    _f(
        "backend",
        "text",
        "",
        "how gradients travelled: mpi, gloo, nccl, or TensorFlow's collective",
    ),  # fmt: skip
    _f("device", "text", "", "cpu or cuda:N (rank 0's)"),
    _f("target", "text", "", "the goal: light, standard or paper"),
    _f("target_accuracy", "number", "fraction", "the goal's validation accuracy (0..1)"),
    _f("reached", "boolean", "", "whether the goal was reached"),
    _f(
        "time_to_target",
        "number",
        "s",
        "benchmark-clock seconds when validation accuracy "
        "first reached the goal; null when it was not reached",
        nullable=True,
    ),  # fmt: skip
    _f(
        "final_val_accuracy",
        "number",
        "fraction",
        "validation accuracy of the final model (accuracy after time); null before any evaluation",
        nullable=True,
    ),  # fmt: skip
    _f(
        "best_val_accuracy",
        "number",
        "fraction",
        "best validation accuracy of any evaluation",
        nullable=True,
    ),  # fmt: skip
    _f(
        "epochs", "number", "epochs", "epochs done (fractional when a budget stopped it mid-epoch)"
    ),  # fmt: skip
    _f(
        THROUGHPUT,
        "number",
        "the task's unit/s",
        "training images (or samples) of all ranks "
        "per second inside training steps; named by the task: images_per_sec, samples_per_sec "
        "(its catalogue entry's throughput_metric); null when not measurable",
        nullable=True,
    ),  # fmt: skip
    _f(
        "comm_share",
        "number",
        "fraction",
        "exposed communication's share of the step time, summed over ranks",
    ),  # fmt: skip
    _f(
        "comm_share_total",
        "number",
        "fraction",
        "the share of step time during which "
        "gradients were in flight, hidden behind backward or not",
    ),  # fmt: skip
    _f(
        "algorithm",
        "text",
        "",
        "how ranks combined their work: the algorithm catalogue's name, or an outside "
        "algorithm's declared NAME",
    ),  # fmt: skip
    _f(
        "algorithm_options",
        "object",
        "",
        "the algorithm's options, typed and completed by its defaults (an outside one's "
        "declaration's)",
    ),  # fmt: skip
    _f(
        "algorithm_source",
        "text",
        "",
        "an uploaded algorithm's SHA-256 (the run's algorithm_source): the code it ran",
        required=False,
    ),  # fmt: skip
    _f(
        "implementation",
        "text",
        "",
        "which code trained: reference, torch-ddp, tensorflow, spark, flink",
    ),
    _f(
        "comm_bytes_per_step",
        "number",
        "bytes",
        "bytes one rank sent per step, the mean over ranks",
    ),  # fmt: skip
    _f(
        "comm_bytes_to_target",
        "number",
        "bytes",
        "bytes one rank sent from the start to the evaluation that reached the target, the "
        "mean over ranks, counted by the harness; null when not reached",
        nullable=True,
        required=False,
    ),  # fmt: skip
    _f(
        "compression_ratio",
        "number",
        "x",
        "an fp32 all-reduce's bytes over these; null with one rank",
        nullable=True,
    ),  # fmt: skip
    _f("elapsed", "number", "s", "seconds on the benchmark clock at the end"),
    _f("seed", "integer", "", "the seed all ranks shared"),
    _f(
        "versions",
        "object",
        "",
        "python, the framework's (torch; tensorflow and keras; pyspark, spark and java; pyflink and java), mpi and mlbench",
    ),  # fmt: skip
    _f(
        "hardware",
        "object",
        "",
        "CPU model and count, threads per rank, memory, hosts, platform, GPU if any",
    ),  # fmt: skip
    _f("stop_reason", "text", "", "target reached, time budget spent or max epochs done"),
    _f("run_id", "text", "", "the master's run id; null without a master", nullable=True),
    _f(
        "dataset_note",
        "text",
        "",
        "why synthetic data was used when auto fell back to it (empty otherwise)",
    ),  # fmt: skip
    _f(
        "implementation_note",
        "text",
        "",
        "what an implementation other than the reference does differently (tensorflow, spark, flink)",
        required=False,
    ),  # fmt: skip
    _f(
        "final_val_top5_accuracy",
        "number",
        "fraction",
        "task 1b: top-5 validation accuracy of the final model",
        nullable=True,
        required=False,
    ),  # fmt: skip
    _f(
        "final_val_perplexity",
        "number",
        "",
        "task 3: validation perplexity of the final model (its goal's metric: lower is better)",
        nullable=True,
        required=False,
    ),  # fmt: skip
    _f(
        "best_val_perplexity",
        "number",
        "",
        "task 3: the lowest validation perplexity of any evaluation",
        nullable=True,
        required=False,
    ),  # fmt: skip
    _f(
        "final_val_bleu",
        "number",
        "BLEU",
        "task 4b: the run's own BLEU of the final model's decoded test set (its goal's metric: higher is better)",
        nullable=True,
        required=False,
    ),  # fmt: skip
    _f(
        "best_val_bleu",
        "number",
        "BLEU",
        "task 4b: the highest BLEU of any evaluation",
        nullable=True,
        required=False,
    ),  # fmt: skip
    _f(
        "config",
        "object",
        "",
        "the run's settings: the entries of CONFIG_FIELDS, then the "
        "task's own (data sizes, schedule, options)",
    ),  # fmt: skip
)

MEASUREMENT_FIELDS: tuple[Field, ...] = (
    _f("task", "text", "", "the measurement task's name, e.g. backend-benchmark"),
    _f("kind", "text", "", "measurement"),
    _f("num_workers", "integer", "ranks", "the number of ranks"),
    _f("backend", "text", "", "the backends measured, comma-separated"),
    _f("backends", "list", "", "the backends measured"),
    _f("ops", "list", "", "the collectives measured"),
    _f("device", "text", "", "cpu or cuda:N (rank 0's)"),
    _f(
        "busbw_mbps",
        "number",
        "Mbit/s",
        "the highest median bus bandwidth of any cell",
        nullable=True,
    ),  # fmt: skip
    _f("peak", "object", "", "the cell of busbw_mbps: op, backend, size", nullable=True),
    _f(
        "results",
        "list",
        "",
        "one row per measured cell (op, backend, size, latency and bandwidths)",
    ),  # fmt: skip
    _f("measured", "integer", "cells", "how many cells were measured"),
    _f("not_measured", "list", "", "the cells the time budget left out"),
    _f("stop_reason", "text", "", "why the sweep ended"),
    _f("elapsed", "number", "s", "seconds the sweep took"),
    _f("versions", "object", "", "python, torch, mpi and mlbench"),
    _f("hardware", "object", "", "CPU model and count, threads per rank, memory, hosts"),
    _f("run_id", "text", "", "the master's run id; null without a master", nullable=True),
    _f("config", "object", "", "the sweep's settings: sizes, warm-up, repeats, caps"),
)


def fields_for(task: str | None) -> tuple[Field, ...]:
    """The record of `task`'s runs: a measurement task's, else a training task's (a task the
    catalogue does not know is held to the training record)."""
    info = catalogue.TASKS.get(task or "")
    return MEASUREMENT_FIELDS if info is not None and info.measurement else TRAINING_FIELDS


def _named(field: Field, task: str | None, summary: Mapping[str, Any]) -> str:
    """A field's key in `task`'s summary: the throughput field takes the task's metric (for a
    task the catalogue does not know, the one the summary holds: catalogue.throughput_of)."""
    if field.name != THROUGHPUT:
        return field.name
    metric, _unit = catalogue.throughput_of(task, lambda m: m in summary)
    return metric or "images_per_sec"


def problems(summary: Any, task: str | None = None) -> dict[str, str]:
    """What in `summary` does not fit the record of `task` (its own `task` field when None):
    field -> why, empty when it fits. Unknown fields are refused: the record is declared."""
    if not isinstance(summary, Mapping):
        return {"": "the summary must be a JSON object"}
    task = task or summary.get("task")
    found: dict[str, str] = {}
    fields = fields_for(task)
    named = {_named(field, task, summary): field for field in fields}
    _misfits(named, summary, "", found)
    for key in sorted(set(summary) - set(named)):
        found[key] = f"{key} is not a field of the summary record (docs/metrics.rst lists them)"
    if fields is TRAINING_FIELDS and isinstance(summary.get("config"), Mapping):
        config_fields = {field.name: field for field in CONFIG_FIELDS}
        _misfits(config_fields, summary["config"], "config.", found)
    return found


def _misfits(
    fields: Mapping[str, Field], values: Mapping[str, Any], prefix: str, found: dict[str, str]
) -> None:
    """Into `found`: each of `fields` (by key) that `values` lacks while it is required, or
    holds with a value of another type, named with `prefix`."""
    for key, field in fields.items():
        name = prefix + key
        if key not in values:
            if field.required:
                found[name] = f"{name} is missing ({_expected(field)})"
        elif not field.fits(values[key]):
            found[name] = f"{name} must be {_expected(field)}, got {_shown(values[key])}"


def _expected(field: Field) -> str:
    article = "an" if field.type[0] in "aeiou" else "a"
    return f"{article} {field.type}" + (" or null" if field.nullable else "")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def training_summary(
    *,
    task: str,
    outcome: Mapping[str, Any],
    throughput: float | None,
    comm_bytes_per_step: float,
    full_allreduce_bytes: int,
    config: Mapping[str, Any],
    **fields: Any,
) -> dict[str, Any]:
    """A training run's summary in the declared order, for every implementation and task.

    `outcome`: the goal's entries (training.progress.outcome); `throughput`: the task's rate, filed
    under its throughput metric; the compression ratio is derived from the bytes here.
    `fields`: the rest by name. A record that does not fit is a bug of the caller: raised.
    """
    values = {
        "task": task,
        **outcome,
        _named(_THROUGHPUT_FIELD, task, {}): throughput,
        "comm_bytes_per_step": comm_bytes_per_step,
        "compression_ratio": (
            full_allreduce_bytes / comm_bytes_per_step if comm_bytes_per_step > 0 else None
        ),
        "config": dict(config),
        **fields,
    }
    return _ordered(values, task)


def measurement_summary(**fields: Any) -> dict[str, Any]:
    """A measurement run's summary in the declared order (see training_summary)."""
    return _ordered({"kind": catalogue.MEASUREMENT, **fields}, fields.get("task"))


def _ordered(values: dict[str, Any], task: str | None) -> dict[str, Any]:
    keys = [_named(f, task, values) for f in fields_for(task)]
    record = {key: values[key] for key in keys if key in values}
    record.update({key: value for key, value in values.items() if key not in record})
    wrong = problems(record, task)
    if wrong:
        raise ValueError("the summary does not fit its record: " + "; ".join(wrong.values()))
    return record


_THROUGHPUT_FIELD = next(f for f in TRAINING_FIELDS if f.name == THROUGHPUT)
# Every name a summary may hold: the declared fields, the throughput field by each task's name.
DECLARED = {f.name for f in (*TRAINING_FIELDS, *MEASUREMENT_FIELDS) if f.name != THROUGHPUT} | {
    info.throughput_metric for info in catalogue.TASKS.values()
}


def read(summary: Mapping[str, Any] | None, name: str) -> Any:
    """The value of the declared field `name` in `summary`; None where it is absent (a run
    without a summary, or one stored before the field existed). Reading a name the record
    does not declare is a bug of the reader, raised at once (KeyError)."""
    if name not in DECLARED:
        raise KeyError(f"{name!r} is not a field of the summary record")
    return (summary or {}).get(name)


def read_config(summary: Mapping[str, Any] | None, name: str) -> Any:
    """An entry of the summary's config (a CONFIG_FIELDS entry or a task's own), or None."""
    config = read(summary, "config")
    return config.get(name) if isinstance(config, Mapping) else None
