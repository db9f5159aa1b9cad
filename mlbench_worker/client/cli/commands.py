"""The commands: one `cmd_*` function per `mlbench` subcommand.

Why a module of its own: each command is a short script over the master's API (create a
run, list, show, follow logs, download, delete, report) or a hand-over to the embedded
launcher (`up`, `down`, `status`). What they print is built from the formatting, waiting
and comparison modules; how a failure becomes a message and an exit code is `master.py`'s job.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import time
from typing import Any

from mlbench_worker.client.api import MLBENCH_IMAGES, resolve_image
from mlbench_worker.client.cli.accuracy import evaluation_line, evaluation_notes, target_line
from mlbench_worker.client.cli.algorithm_file import download_algorithm, uploaded
from mlbench_worker.client.cli.audit_line import audit_line
from mlbench_worker.client.cli.comparison import sent_line
from mlbench_worker.client.cli.costs import cost_line
from mlbench_worker.client.cli.formatting import (
    Column,
    View,
    algorithm_text,
    duration,
    fit,
    implementation_text,
    run_duration,
    runs_list,
    short,
    wrap,
)
from mlbench_worker.client.cli.master import (
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    FINAL_STATES,
    CliError,
    Master,
)
from mlbench_worker.client.cli.series import is_series, queue_text, start_series, targets
from mlbench_worker.client.cli.trust import origin_lines
from mlbench_worker.client.cli.waiting import wait_for
from mlbench_worker.shared import catalogue


def cmd_launcher(args: argparse.Namespace) -> int:
    """`up`, `down`, `status`: run the embedded launcher of the master package."""
    if importlib.util.find_spec("mlbench_master") is None or (
        importlib.util.find_spec("django") is None
    ):
        raise CliError(
            "the master is not installed in this Python: pip install 'mlbench[master]' "
            "(or use MLBENCH_URL to talk to a master elsewhere)",
            EXIT_USAGE,
        )
    argv = [sys.executable, "-m", "mlbench_master", args.command]
    if args.command == "up":
        if args.detach:
            argv.append("--detach")
        if args.port:
            argv += ["--port", str(args.port)]
        if getattr(args, "cluster", None):
            argv += ["--cluster", args.cluster]
        if getattr(args, "host", None):
            argv += ["--host", args.host]
    return subprocess.call(argv)


def task_of(name: str) -> str:
    """The task `--task NAME` names: a task, or the original client's display or image name
    (`resolve_image`). Anything else is a usage error that calls it an unknown task and
    lists the tasks first: `--task` asks for a task, not an image."""
    try:
        return resolve_image(name)
    except ValueError:
        pass
    known = catalogue.seed_image(name) or catalogue.seed_by_title(name)
    what = f"{known.title} ({known.image}) is not implemented here yet" if known else ""
    raise CliError(
        f"--task: {what or f'unknown task {name!r}'}; the tasks: {', '.join(catalogue.TASKS)} "
        f"(the original client's names work too, e.g. {next(iter(MLBENCH_IMAGES))!r})",
        EXIT_USAGE,
    )


def cmd_run(args: argparse.Namespace, master: Master) -> int:
    task = task_of(args.task) if args.task is not None else None
    options: dict[str, str] = {}
    for item in args.algorithm_option:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(
                f"--algorithm-option {item!r}: give KEY=VALUE, e.g. --algorithm-option rank=4",
                EXIT_USAGE,
            )
        options[key.strip()] = value.strip()
    outside = uploaded(args, master)  # --algorithm-file: sent first, named by its hash
    fields: dict[str, Any] = {
        "algorithm": args.algorithm,
        "algorithm_options": options or None,
        "algorithm_source": outside["sha256"] if outside else None,
        "implementation": args.implementation,
        "lr_schedule": args.lr_schedule,
        "task": task,
        "backend": args.backend,
        "gpu_enabled": args.gpu_enabled,
        "target": args.target,
        "time_budget": args.time_budget,
        "max_epochs": args.max_epochs,
        "test_examples": args.test_examples,
        "train_examples": args.train_examples,
        "batch_size": args.batch_size,
        "dataset": args.dataset,
        "time_limit": args.time_limit,
        "custom_image_command": args.custom_command,
        "resume_from": args.resume_from,
        "latency": args.latency,
    }
    seeds, repeats, counts = targets(args)
    if is_series(seeds, repeats, counts):
        if args.resume_from is not None:
            raise CliError("--resume-from continues one run; it cannot start a series", EXIT_USAGE)
        fields.update(num_cpus=args.cpus, max_bandwidth=args.max_bandwidth)
        fields["run_all_nodes"] = bool(args.custom_command and args.all_ranks) or None
        return start_series(args, master, fields, counts)
    fields["seed"] = seeds[0] if seeds else (1 if repeats else None)  # --repeats 1: seed 1
    # --cpus left out is sent as none: the master gives the run's workers their share of its
    # machine (GET /api/runs/defaults/ shows it for the default workers).
    workers, cpus, bandwidth = (counts or [None])[0], args.cpus, args.max_bandwidth
    missing = None in (workers, bandwidth)
    if missing and args.resume_from is None:  # a resumed run takes the rest from its parent
        table = master_defaults(master)
        workers = table["num_workers"] if workers is None else workers
        bandwidth = table["max_bandwidth"] if bandwidth is None else bandwidth
    run = master.json(
        "create_run",
        args.name,
        workers,
        cpus,
        bandwidth,
        run_all_nodes=bool(args.custom_command and args.all_ranks),
        queue=args.queue,
        **{k: v for k, v in fields.items() if v is not None},
    )
    run_id = run["id"]
    print(f"run {run_id} {run['name']!r} created ({queue_text(run)}, seed {run.get('seed')})")
    for warning in run.get("warnings") or ():
        print(f"warning: {warning}")
    if run.get("resumed_from") is not None:
        print(resumed_line(run))
    if not args.wait:
        print(f"follow it with `mlbench show {run_id}` or `mlbench logs {run_id} --follow`")
        return EXIT_OK
    return wait_for(master, run_id)


def master_defaults(master: Master) -> dict[str, Any]:
    """The master's table of run defaults (GET /api/runs/defaults/): what the form shows and
    the API applies, so `mlbench run` without options starts the same run as they do."""
    try:
        body = master.json("run_defaults")
    except CliError as exc:
        if exc.code != EXIT_NOT_FOUND:
            raise
        body = None  # a master older than the table
    if not isinstance(body, dict) or not isinstance(body.get("defaults"), dict):
        raise CliError(
            f"the master at {master.url} did not say its run defaults "
            "(GET /api/runs/defaults/); give --workers, --cpus and --max-bandwidth",
            EXIT_USAGE,
        )
    return body["defaults"]


def network_line(run: dict[str, Any]) -> str:
    """The run's link limits and whether they were applied (the launch record when it
    was launched, else what the master planned when the run was created)."""
    asked = f"{run.get('max_bandwidth')} Mbit/s per worker"
    if run.get("latency"):
        asked += f", {run['latency']:g} ms each way"
    notes = {
        **((run.get("manifest") or {}).get("network") or {}),
        **(run.get("job_metadata") or {}),
    }
    missing = [
        f"{name} not applied ({note['why']})"
        for name in ("max_bandwidth", "latency")
        if isinstance(note := notes.get(name), dict) and note.get("why") and not note.get("applied")
    ]
    if missing:
        return asked + "; " + "; ".join(missing)
    latency = notes.get("latency")
    by = latency.get("by") if isinstance(latency, dict) and latency.get("applied") else None
    return asked + "; applied" + (f" (latency by {by})" if by else "")


def resumed_line(run: dict[str, Any]) -> str:
    """Where a resumed run started, so its result is never read as one from scratch."""
    point = (run.get("manifest") or {}).get("resumed_from") or {}
    where = ""
    if "epoch" in point:
        where = (
            f" at epoch {point['epoch']} (step {point.get('step')}, "
            f"{duration(point.get('elapsed'))} on the benchmark clock)"
        )
    return (
        f"resumed from run {run['resumed_from']}'s checkpoint{where}: it continues that "
        "run's training, it did not start from scratch"
    )


def _one_line(text: Any) -> str:
    return " ".join(str(text or "").split())


# `mlbench runs`: the default view (what a run is and how it went) and, with --wide, its
# dimensions too. `drop`: the order in which a narrow terminal leaves columns out.
RUNS_COLUMNS = [
    Column("ID", lambda r: r["id"]),
    Column("NAME", lambda r: _one_line(r.get("name")), most=28, least=12),
    Column("STATE", queue_text),
    Column("WORKERS", lambda r: r.get("num_workers")),
    Column(
        "TASK",
        lambda r: "command" if r.get("custom_image_command") else (r.get("task") or "-"),
        drop=2,
    ),
    Column("ALGORITHM", lambda r: algorithm_text(r) or "-", wide=True),
    Column("IMPLEMENTATION", lambda r: implementation_text(r) or "-", wide=True),
    Column("DATASET", lambda r: r.get("dataset_used") or r.get("dataset") or "-", drop=5),
    Column("TARGET", lambda r: r.get("target") or "-", wide=True),
    Column("SEED", lambda r: r.get("seed"), wide=True),
    Column(
        "CREATED",
        lambda r: (r.get("created_at") or "")[:19].replace("T", " "),
        brief=lambda r: (r.get("created_at") or "")[:16].replace("T", " "),
        drop=4,
    ),
    Column("TIME", lambda r: duration(run_duration(r)), drop=3),
    Column("REASON", lambda r: _one_line(r.get("reason")), most=40, least=12),
]


def cmd_runs(args: argparse.Namespace, master: Master) -> int:
    runs = runs_list(master.json("get_runs", limit=args.last))  # a bad N: the API's 400
    if args.json:
        print(json.dumps(runs, indent=2, sort_keys=True))
        return EXIT_OK
    if not runs:
        print("no runs yet: start one with `mlbench run NAME --workers 2`")
        return EXIT_OK
    print(fit(RUNS_COLUMNS, runs, View.of(args)))
    return EXIT_OK


def cmd_show(args: argparse.Namespace, master: Master) -> int:
    run = master.json("get_run", args.run)
    if args.json:
        print(json.dumps(run, indent=2, sort_keys=True))
        return EXIT_OK
    view = View.of(args)
    keys = [
        "id", "name", "state", "queue_position", "series", "seed", "reason", "task", "algorithm",
        "implementation", "lr_schedule", "backend", "num_workers", "num_cpus",
        "target", "light_target", "dataset", "dataset_used", "time_budget",
        "effective_time_budget", "time_budget_source", "max_epochs", "time_limit", "exit_code",
        "created_at", "started_at", "finished_at",
    ]  # fmt: skip
    width = max(len(k) for k in keys)

    def field(name: str, value: Any) -> None:
        """NAME  VALUE, a long value wrapped under itself (whole with --wide)."""
        text = " ".join(str(value).split())
        room = view.width - width - 2
        if view.wraps and len(text) > room >= 20:
            text = wrap(text, room, indent="").replace("\n", "\n" + " " * (width + 2))
        print(f"{name.ljust(width)}  {text}")

    for key in keys:
        if key in run and run[key] not in (None, ""):
            shown = {"algorithm": algorithm_text, "implementation": implementation_text}
            field(key, shown[key](run) if key in shown else run[key])
    field("network", network_line(run))
    if sent := sent_line(run.get("summary") or {}):
        field("sent", sent)
    for name, line in origin_lines(run):
        field(name, line)
    field("cost", cost_line(run))
    graded = evaluation_line(run)
    if graded:
        field("graded by", graded)
        field("model audit", audit_line(run))
    for note in evaluation_notes(run):
        field("", note)
    if reached := target_line(run):
        field("time to target", reached)
    if run.get("custom_image_command"):
        field("command", run["custom_image_command"])
    if run.get("resumed_from") is not None:
        field("resumed_from", resumed_line(run))
    summary = run.get("summary") or {}
    if summary:
        print("\nsummary:")
        for key in sorted(summary):
            value = summary[key]
            if isinstance(value, dict | list):
                value = json.dumps(value, sort_keys=True)
            line = f"{key}: {value}"
            print("  " + (line if view.wide else short(line, view.width - 2)))  # whole: --wide
    print(f"\nduration: {duration(run_duration(run))}   dashboard: {master.url}/runs/{run['id']}/")
    return EXIT_OK


def cmd_logs(args: argparse.Namespace, master: Master) -> int:
    offset = 0
    while True:
        body = master.json("get_run_logs", args.run, offset=offset)
        chunks, offset = _log_page(body, offset)
        for chunk in chunks:
            _print_chunk(chunk)
        sys.stdout.flush()
        if chunks:
            continue  # more may be waiting behind this page
        if not args.follow:
            return EXIT_OK
        run = master.json("get_run", args.run)
        if run["state"] in FINAL_STATES:
            # One last page: the job stores the final lines before the state changes.
            body = master.json("get_run_logs", args.run, offset=offset)
            for chunk in _log_page(body, offset)[0]:
                _print_chunk(chunk)
            return EXIT_OK
        time.sleep(1.0)


def _log_page(body: Any, offset: int) -> tuple[list[dict], int]:
    """Chunks of one logs response and the offset to ask for next."""
    if isinstance(body, dict):
        chunks = body.get("results") or body.get("chunks") or []
        next_offset = body.get("next_offset")
    else:
        chunks = list(body or [])
        next_offset = None
    if next_offset is None:
        next_offset = max([offset] + [int(c.get("seq", -1)) + 1 for c in chunks])
    return chunks, int(next_offset)


def _print_chunk(chunk: dict) -> None:
    rank = chunk.get("rank")
    tag = f"[{'-' if rank is None else rank}:{chunk.get('stream', 'stdout')[3:]}] "
    for line in (chunk.get("text") or "").rstrip("\n").split("\n"):
        print(tag + line)


def cmd_download(args: argparse.Namespace, master: Master) -> int:
    if args.series is not None and not args.mllog:
        raise CliError("--series downloads a series' MLPerf logs: add --mllog", EXIT_USAGE)
    if args.mllog:
        if (args.run is None) == (args.series is None):
            raise CliError("--mllog: give a RUN or --series ID (one of the two)", EXIT_USAGE)
        from mlbench_worker.client.cli.results import download_mllog

        return download_mllog(args, master)
    if args.algorithm:
        return download_algorithm(args, master)
    if args.run is None:
        raise CliError("give the RUN whose metrics to download", EXIT_USAGE)
    master.json("get_run", args.run)  # the metrics of a run that does not exist are an empty zip
    response = master.call("download_run_metrics", args.run)
    path = args.output or f"run-{args.run}-metrics.zip"
    size = 0
    with open(path, "wb") as fh:
        for block in response.iter_content(64 * 1024):
            fh.write(block)
            size += len(block)
    print(f"wrote {path} ({size} bytes)")
    return EXIT_OK


def cmd_delete(args: argparse.Namespace, master: Master) -> int:
    """`mlbench delete RUN`, or `mlbench delete --series ID` (series.py)."""
    if (args.run is None) == (args.series is None):
        raise CliError("delete: give a RUN or --series ID (one of the two)", EXIT_USAGE)
    if args.series is not None:
        from mlbench_worker.client.cli.series import delete_series

        return delete_series(args.series, master)
    run = master.json("get_run", args.run)
    master.call("delete_run", args.run)
    if run.get("state") in ("INITIALIZED", "STARTED"):
        print(f"run {args.run} cancelled and deleted (its worker processes were stopped)")
    else:
        print(f"run {args.run} deleted")
    return EXIT_OK
