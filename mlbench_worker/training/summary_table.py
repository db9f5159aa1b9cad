"""The end-of-run table rank 0 prints: the same facts as the run's summary record, for a person.

Torch-free, so the TensorFlow implementation prints the same table.
"""

from __future__ import annotations

from mlbench_worker.shared import catalogue

# The frameworks a summary's versions may name, in the order the table shows the first.
FRAMEWORKS = ("torch", "tensorflow")


def _counted(summary: dict) -> tuple[str, object]:
    """(unit, value) of the run's throughput, by the catalogue's rule (`throughput_of`)."""
    metric, unit = catalogue.throughput_of(
        summary.get("task"), lambda m: summary.get(m) is not None
    )
    return unit, summary.get(metric) if metric else None


def _data_size(summary: dict, unit: str) -> str | None:
    """ "50000 train / 10000 test images": the sizes the config reports, in the task's words
    (task 1a's config says train_images, task 2's train_samples)."""
    config = summary.get("config") or {}
    for kind in dict.fromkeys((unit.removesuffix("/s"), "images", "samples")):
        train = config.get(f"train_{kind}")
        test = config.get(f"test_{kind}", config.get(f"valid_{kind}"))
        if train is not None or test is not None:
            return f"{_or_dash(train)} train / {_or_dash(test)} test {kind}"
    return None


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)


def _algorithm_rows(summary: dict) -> list[tuple[str, str]]:
    """The algorithm, its bytes per step and their compression (absent from older summaries)."""
    if "algorithm" not in summary:
        return []
    from mlbench_worker.shared.algorithm_catalogue import describe

    per_step, ratio = summary.get("comm_bytes_per_step"), summary.get("compression_ratio")
    return [
        ("algorithm", describe(summary["algorithm"], summary.get("algorithm_options"))),
        ("comm bytes/step", "-" if per_step is None else f"{per_step:,.0f} B"),
        ("compression", "-" if ratio is None else f"{ratio:.3g}x (vs fp32 all-reduce)"),
    ]


def _target(summary: dict) -> str:
    """ "standard (80% val accuracy)", or the goal's own metric where it is another
    (task 3: "standard (val perplexity 70, lower is better)")."""
    value = summary["target_accuracy"]
    info = catalogue.TASKS.get(summary.get("task") or "")
    goal = info.goals.get(summary["target"]) if info else None
    if goal is None or goal.metric == "val_accuracy":
        return f"{summary['target']} ({value:.0%} val accuracy)"
    better = "lower" if goal.direction == catalogue.DOWN else "higher"
    return f"{summary['target']} ({goal.metric.replace('_', ' ')} {value:g}, {better} is better)"


def _percent(share: float | None) -> float | None:
    return None if share is None else 100 * share


def _framework_row(summary: dict) -> tuple[str, str]:
    """ "python / torch" or "python / tensorflow": the framework the run trained with."""
    v = summary["versions"]
    name = next((f for f in FRAMEWORKS if f in v), "torch")
    return f"python / {name}", f"{v['python']} / {v.get(name, '-')}"


def summary_table(summary: dict) -> str:
    """The end-of-run table rank 0 prints (the same facts as the summary record).

    Throughput and data sizes are in the task's own unit (images for task 1a, samples for
    task 2), and a synthetic run names the real data set it is not."""

    def fmt(value: object, unit: str = "") -> str:
        if value is None:
            return "-"
        if isinstance(value, bool):
            return "yes" if value else "no"
        if isinstance(value, float):
            return f"{value:.4g}{unit}"
        return f"{value}{unit}"

    v = summary["versions"]
    unit, rate = _counted(summary)
    dataset = summary["dataset"]
    if dataset == "synthetic":
        info = catalogue.TASKS.get(summary.get("task") or "")
        real = f"the {info.dataset} data set" if info else "the real data set"
        dataset = f"synthetic (generated; NOT {real})"
    size = _data_size(summary, unit)
    rows = [
        ("task", summary["task"]),
        *([("implementation", summary["implementation"])] if "implementation" in summary else []),
        ("model", summary["model"]),
        ("dataset", dataset),
        *([("data", size)] if size else []),
        ("workers", summary["num_workers"]),
        ("backend", summary["backend"]),
        ("device", summary["device"]),
        ("target", _target(summary)),
        ("reached", fmt(summary["reached"])),
        ("time to target", fmt(summary["time_to_target"], " s")),
        ("final val accuracy", fmt(summary["final_val_accuracy"])),
        ("best val accuracy", fmt(summary["best_val_accuracy"])),
        *[
            (name.replace("_", " "), fmt(summary[name]))
            for name in ("final_val_perplexity", "best_val_perplexity")
            if name in summary
        ],
        ("epochs", fmt(summary["epochs"])),
        # Task 2 counts tens of thousands of samples per second: no exponent.
        (unit, f"{rate:.1f}" if isinstance(rate, int | float) else fmt(rate)),
        ("comm share", fmt(_percent(summary["comm_share"]), " %")),
        *_algorithm_rows(summary),
        ("elapsed", fmt(summary["elapsed"], " s")),
        ("stopped because", summary.get("stop_reason", "")),
        _framework_row(summary),
        ("MPI", v["mpi"]),
    ]
    width = max(len(k) for k, _ in rows)
    line = "=" * (width + 3 + max(len(str(val)) for _, val in rows))
    body = "\n".join(f"{k:<{width}} : {val}" for k, val in rows)
    return f"{line}\nmlbench result\n{line}\n{body}\n{line}"
