"""The `mlbench` command: start the embedded master, run benchmarks, read their results.

It talks to the master only over the REST API (through `ApiClient`), so the same command
works against the embedded master on this machine and against a cluster's master
(MLBENCH_URL / MLBENCH_TOKEN). `up`, `down` and `status` hand over to the embedded launcher
(`python -m mlbench_master`). Importing this module must stay cheap: no torch, no Django.

Exit codes (also in docs/cli.rst):
  0 success · 1 the run ended FAILED or CANCELLED · 2 bad command line or input refused by
  the master (400) · 3 master not reachable / not running · 4 token missing or refused ·
  5 no such run · 6 another run is active (409) · 7 the master failed (5xx)
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any

import requests

from mlbench_worker.api import ApiClient, default_token, default_url, mlbench_home

EXIT_OK = 0
EXIT_RUN_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_AUTH = 4
EXIT_NOT_FOUND = 5
EXIT_CONFLICT = 6
EXIT_SERVER = 7

FINAL_STATES = ("FINISHED", "FAILED", "CANCELLED")
PROGRESS_METRICS = "epoch,elapsed,val_accuracy,train_accuracy,images_per_sec"
REPORT_METRICS = "val_accuracy,elapsed,time_to_target"
POLL_SECONDS = 2.0


class CliError(Exception):
    """An error for the user: the message says what happened and what to do."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


# ------------------------------------------------------------------------ talking to the API


class Master:
    """The master as the CLI sees it: URL, token, and calls that fail with a useful message."""

    def __init__(self, url: str | None, token: str | None) -> None:
        url = url or default_url()
        if not url:
            raise CliError(
                "no master configured: start one on this machine with `mlbench up`, "
                "or point at a running one with MLBENCH_URL=http://HOST:PORT",
                EXIT_UNREACHABLE,
            )
        self.client = ApiClient(url=url, in_cluster=False, token=token or default_token())
        self.url = self.client.endpoint

    def call(self, method: str, *args: Any, **kwargs: Any) -> requests.Response:
        try:
            response = getattr(self.client, method)(*args, **kwargs).result()
        except requests.ConnectionError as exc:
            raise CliError(
                f"cannot reach the master at {self.url}: start it with `mlbench up` "
                "(or set MLBENCH_URL to where it runs)",
                EXIT_UNREACHABLE,
            ) from exc
        except requests.Timeout as exc:
            raise CliError(
                f"the master at {self.url} did not answer in time: check `mlbench status`",
                EXIT_UNREACHABLE,
            ) from exc
        if response.status_code >= 400:
            raise self._error(response)
        return response

    def json(self, method: str, *args: Any, **kwargs: Any) -> Any:
        response = self.call(method, *args, **kwargs)
        if response.status_code == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError as exc:
            raise CliError(
                f"the master at {self.url} answered with something that is not JSON "
                f"(HTTP {response.status_code}): is MLBENCH_URL pointing at mlbench?",
                EXIT_SERVER,
            ) from exc

    def _error(self, response: requests.Response) -> CliError:
        detail = _error_detail(response)
        status = response.status_code
        if status in (401, 403):
            has_token = bool(self.client.token)
            fix = (
                "the token was refused: set MLBENCH_TOKEN to a valid API token"
                if has_token
                else "no API token: set MLBENCH_TOKEN (the embedded master writes its "
                "token to MLBENCH_HOME/token)"
            )
            return CliError(f"{fix} ({status}: {detail})", EXIT_AUTH)
        if status == 404:
            return CliError(f"not found: {detail}; list the runs with `mlbench runs`", 5)
        if status == 409:
            return CliError(
                f"{detail}; wait for it to end or stop it with `mlbench delete RUN`",
                EXIT_CONFLICT,
            )
        if status >= 500:
            return CliError(
                f"the master failed (HTTP {status}): {detail}; see its log "
                f"({mlbench_home() / 'logs'} for the embedded master)",
                EXIT_SERVER,
            )
        return CliError(f"the master refused the request (HTTP {status}): {detail}", EXIT_USAGE)


def _error_detail(response: requests.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:300] or response.reason
    return _flatten(body)


def _flatten(body: Any, prefix: str = "") -> str:
    """A DRF-style error body ({"field": ["problem"]}, {"detail": ...}) as one line."""
    if isinstance(body, dict):
        if "detail" in body and len(body) <= 2:
            return _flatten(body["detail"], prefix)
        if "message" in body and isinstance(body["message"], str):
            return body["message"]
        parts = []
        for key, value in body.items():
            name = f"{prefix}{key}"
            parts.append(
                _flatten(value, name + ".")
                if isinstance(value, dict)
                else f"{name}: {_flatten(value)}"
            )
        return "; ".join(parts)
    if isinstance(body, list):
        return " ".join(_flatten(v, prefix) for v in body)
    return str(body)


# ------------------------------------------------------------------------ formatting


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def _percent(value: Any) -> str:
    try:
        return f"{100 * float(value):.1f}%"
    except (TypeError, ValueError):
        return "-"


def _parse_time(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _run_duration(run: dict, now: dt.datetime | None = None) -> float | None:
    """Wall time since the run started (start-up included), to its end or `now`."""
    start = _parse_time(run.get("started_at"))
    if start is None:
        return None
    end = _parse_time(run.get("finished_at")) or now or dt.datetime.now(dt.UTC)
    return (end - start).total_seconds()


def _short(text: str | None, width: int = 60) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _runs_list(body: Any) -> list[dict]:
    if isinstance(body, dict) and "results" in body:
        return body["results"]
    return list(body or [])


# ------------------------------------------------------------------------ commands


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
    return subprocess.call(argv)


def cmd_run(args: argparse.Namespace, master: Master) -> int:
    fields: dict[str, Any] = {
        "task": args.task,
        "backend": args.backend,
        "target": args.target,
        "time_budget": args.time_budget,
        "max_epochs": args.max_epochs,
        "dataset": args.dataset,
        "time_limit": args.time_limit,
        "custom_image_command": args.custom_command,
    }
    run = master.json(
        "create_run",
        args.name,
        args.workers,
        num_cpus=args.cpus,
        run_all_nodes=bool(args.custom_command and args.all_ranks),
        **{k: v for k, v in fields.items() if v is not None},
    )
    run_id = run["id"]
    print(f"run {run_id} {run['name']!r} created ({run.get('state', 'INITIALIZED')})")
    if not args.wait:
        print(f"follow it with `mlbench show {run_id}` or `mlbench logs {run_id} --follow`")
        return EXIT_OK
    return wait_for(master, run_id)


def wait_for(master: Master, run_id: int) -> int:
    """Poll the run and draw a progress line until it ends; then print its results."""
    bar = Progress(sys.stdout)
    try:
        while True:
            run = master.json("get_run", run_id)
            latest: dict[str, Any] = {}
            if run["state"] == "STARTED":
                latest = _latest_metrics(master, run_id)
            bar.update(run, latest)
            if run["state"] in FINAL_STATES:
                break
            time.sleep(POLL_SECONDS)
    except KeyboardInterrupt:
        bar.close()
        print(
            f"\nstopped waiting; run {run_id} goes on. Stop it with `mlbench delete {run_id}`.",
            file=sys.stderr,
        )
        return 130
    bar.close()
    print(f"run {run_id} {run['state']}" + (f": {run['reason']}" if run.get("reason") else ""))
    if run["state"] == "FINISHED":
        print()
        print(report_table(master, [run]))
    else:
        print(f"see its output with `mlbench logs {run_id}`")
    print(f"\ndashboard: {master.url}/  (this run: {master.url}/runs/{run_id}/)")
    return EXIT_OK if run["state"] == "FINISHED" else EXIT_RUN_FAILED


def _latest_metrics(master: Master, run_id: int) -> dict[str, Any]:
    """The newest point of each metric of a run: {name: {"value", "metadata", ...}}."""
    try:
        body = master.json("get_run_metrics", run_id, last_n=1, metric_filter=PROGRESS_METRICS)
    except CliError:
        return {}
    latest = {}
    if isinstance(body, dict):
        for name, points in body.items():
            if isinstance(points, list) and points:
                latest[name] = points[-1]
    return latest


class Progress:
    """One self-rewriting line on a terminal; a line per change (at most every 15 s) else."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.last = ""
        self.last_print = 0.0

    def update(self, run: dict, latest: dict[str, Any]) -> None:
        line = self.render(run, latest)
        if self.tty:
            width = shutil.get_terminal_size((100, 20)).columns - 1
            self.stream.write("\r" + line[:width].ljust(min(width, max(len(self.last), 1))))
            self.stream.flush()
        elif line != self.last and time.monotonic() - self.last_print >= 15:
            self.stream.write(line + "\n")
            self.stream.flush()
            self.last_print = time.monotonic()
        self.last = line

    def close(self) -> None:
        if self.tty and self.last:
            self.stream.write("\n")
            self.stream.flush()

    @staticmethod
    def render(run: dict, latest: dict[str, Any], now: dt.datetime | None = None) -> str:
        """The progress line of a run from its newest metric values.

        Time is the benchmark clock: the newest `elapsed` point (seconds since the first
        training step, evaluation included) plus the time since that point was dated, so
        mpirun and data start-up are not counted and the line keeps ticking between log
        intervals. Runs that post no `elapsed` (custom commands, older workers) fall back to
        wall time since the run started ("running"). The ETA is the sooner of the time
        budget's end and the epoch limit at the pace so far (benchmark seconds per epoch
        from the newest `elapsed` and `epoch`); reaching the target may end the run sooner.
        """
        state = run["state"]
        if state == "INITIALIZED":
            return f"run {run['id']}: waiting for workers"
        now = now or dt.datetime.now(dt.UTC)
        running = _run_duration(run, now) or 0.0
        epoch = _value(latest, "epoch")
        clock = _benchmark_clock(run, latest, now)
        spent = clock if clock is not None else running
        fraction, eta = _progress(run, epoch, spent, _value(latest, "elapsed"))
        if state == "STARTED" and fraction is not None:
            fraction = min(fraction, 0.99)  # done only when the run says so
        parts = [f"run {run['id']}"]
        if state in FINAL_STATES:
            fraction = 1.0 if state == "FINISHED" else fraction
        if fraction is not None:
            filled = int(round(fraction * 20))
            parts.append("[" + "#" * filled + "-" * (20 - filled) + f"] {100 * fraction:3.0f}%")
        if epoch is not None:
            total = f"/{run['max_epochs']}" if run.get("max_epochs") else ""
            parts.append(f"epoch {epoch:.2f}{total}")
        if "val_accuracy" in latest:
            parts.append(f"val acc {_percent(latest['val_accuracy']['value'])}")
        if "train_accuracy" in latest:
            parts.append(f"train acc {_percent(latest['train_accuracy']['value'])}")
        if "images_per_sec" in latest:
            parts.append(f"{float(latest['images_per_sec']['value']):.0f} img/s")
        if not latest and state == "STARTED":
            parts.append("starting, no metrics yet")
        if clock is not None:
            parts.append(f"elapsed {_duration(clock)}")
        else:
            parts.append(f"running {_duration(running)}")
        if eta is not None and state not in FINAL_STATES:
            parts.append(f"ETA ~{_duration(eta)}")
        if state in FINAL_STATES:
            parts.append(state)
        return "  ".join(parts)


def _value(latest: dict[str, Any], name: str) -> float | None:
    try:
        return float(latest[name]["value"])
    except (KeyError, TypeError, ValueError):
        return None


def _benchmark_clock(run: dict, latest: dict[str, Any], now: dt.datetime) -> float | None:
    """Seconds on the benchmark clock now, from the newest `elapsed` point; None without one.

    While the run is active the clock has gone on since that point was dated; once it ended
    the summary's `elapsed` (the worker's own final reading) wins."""
    summary = run.get("summary") or {}
    if run["state"] in FINAL_STATES and summary.get("elapsed") is not None:
        return float(summary["elapsed"])
    value = _value(latest, "elapsed")
    if value is None:
        return None
    if run["state"] != "STARTED":
        return value
    dated = _parse_time(latest["elapsed"].get("date"))
    return value + max(0.0, (now - dated).total_seconds()) if dated else value


def _progress(
    run: dict, epoch: float | None, spent: float, elapsed_at_epoch: float | None
) -> tuple[float | None, float | None]:
    """(fraction done, seconds left) against the time budget and the epoch limit: the run
    stops at whichever comes first, so the larger fraction and the smaller ETA win."""
    fraction = eta = None
    budget = run.get("time_budget")
    max_epochs = run.get("max_epochs")
    if budget:
        fraction = min(1.0, spent / float(budget))
        eta = max(0.0, float(budget) - spent)
    if max_epochs and epoch:
        base = elapsed_at_epoch if elapsed_at_epoch is not None else spent
        pace = base / epoch  # seconds per epoch so far
        left = max(0.0, pace * (float(max_epochs) - epoch) - (spent - base))
        by_epoch = min(1.0, epoch / float(max_epochs))
        fraction = by_epoch if fraction is None else max(fraction, by_epoch)
        eta = left if eta is None else min(eta, left)
    return fraction, eta


def clock_at(elapsed: list[dict], date: dt.datetime) -> float | None:
    """Benchmark-clock seconds at `date`, from a run's `elapsed` points ({date, value}):
    linear between points, at wall speed before the first and after the last (the same
    rule as the dashboard's clock.js)."""
    pts = sorted(
        (d, float(p["value"]))
        for p in elapsed
        if (d := _parse_time(p.get("date"))) is not None and p.get("value") is not None
    )
    if not pts:
        return None
    if date <= pts[0][0]:
        return pts[0][1] - (pts[0][0] - date).total_seconds()
    for (d0, v0), (d1, v1) in itertools.pairwise(pts):
        if date <= d1:
            span = (d1 - d0).total_seconds()
            return v1 if span <= 0 else v0 + (date - d0).total_seconds() / span * (v1 - v0)
    return pts[-1][1] + (date - pts[-1][0]).total_seconds()


def cmd_runs(args: argparse.Namespace, master: Master) -> int:
    runs = _runs_list(master.json("get_runs"))
    if not runs:
        print("no runs yet: start one with `mlbench run NAME --workers 2`")
        return EXIT_OK
    rows = [
        [
            r["id"],
            _short(r.get("name"), 24),
            r.get("state"),
            r.get("num_workers"),
            "command" if r.get("custom_image_command") else (r.get("task") or "-"),
            r.get("dataset_used") or r.get("dataset") or "-",
            (r.get("created_at") or "")[:19].replace("T", " "),
            _duration(_run_duration(r)),
            _short(r.get("reason"), 50),
        ]
        for r in runs
    ]
    print(
        _table(
            ["ID", "NAME", "STATE", "WORKERS", "TASK", "DATASET", "CREATED", "TIME", "REASON"],
            rows,
        )
    )
    return EXIT_OK


def cmd_show(args: argparse.Namespace, master: Master) -> int:
    run = master.json("get_run", args.run)
    if args.json:
        print(json.dumps(run, indent=2, sort_keys=True))
        return EXIT_OK
    keys = [
        "id", "name", "state", "reason", "task", "backend", "num_workers", "num_cpus",
        "target", "light_target", "dataset", "dataset_used", "time_budget", "max_epochs",
        "time_limit", "exit_code", "created_at", "started_at", "finished_at",
    ]  # fmt: skip
    width = max(len(k) for k in keys)
    for key in keys:
        if key in run and run[key] not in (None, ""):
            print(f"{key.ljust(width)}  {run[key]}")
    if run.get("custom_image_command"):
        print(f"{'command'.ljust(width)}  {run['custom_image_command']}")
    summary = run.get("summary") or {}
    if summary:
        print("\nsummary:")
        for key in sorted(summary):
            value = summary[key]
            if isinstance(value, dict):
                value = json.dumps(value, sort_keys=True)
            print(f"  {key}: {value}")
    print(
        f"\nduration: {_duration(_run_duration(run))}   dashboard: {master.url}/runs/{run['id']}/"
    )
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
    run = master.json("get_run", args.run)
    master.call("delete_run", args.run)
    if run.get("state") in ("INITIALIZED", "STARTED"):
        print(f"run {args.run} cancelled and deleted (its worker processes were stopped)")
    else:
        print(f"run {args.run} deleted")
    return EXIT_OK


def cmd_report(args: argparse.Namespace, master: Master) -> int:
    runs = [master.json("get_run", r) for r in args.runs]
    print(report_table(master, runs))
    return EXIT_OK


def report_table(master: Master | None, runs: list[dict]) -> str:
    """Runs side by side: time to target, accuracy after time, images/s, speed-up, comm share.

    Speed-up is against a 1-worker run among `runs` with the same set-up
    (`setup_differences`); a 1-worker run is its own baseline (1.00x). It compares times
    to target when both reached it, else throughput (marked "thr"). Without a comparable
    1-worker run the column says "-" and a note under the table says why; a warning line
    above it says when the runs differ in data set or task.
    """
    rows = []
    notes = []
    for run in runs:
        s = run.get("summary") or {}
        reported = bool(s)
        if not reported and master is not None and run.get("state") != "INITIALIZED":
            s = _summary_from_series(master, run)
        target = s.get("target") or run.get("target") or "-"
        if s.get("target_accuracy") is not None:
            target = f"{target} ({_percent(s['target_accuracy'])})"
        ttt = s.get("time_to_target")
        reached = _duration(ttt) if ttt is not None else ("not reached" if reported else "-")
        after = "-"
        if s.get("final_val_accuracy") is not None:
            after = _percent(s["final_val_accuracy"])
            if s.get("elapsed"):
                after += f" @ {_duration(s['elapsed'])}"
        ips = f"{float(s['images_per_sec']):.0f}" if s.get("images_per_sec") else "-"
        base, why = _baseline(run, runs)
        speedup = _speedup(run, base) if base is not None else "-"
        # A lone run has nothing to be compared with: a note would only be noise.
        if why and len(runs) > 1 and (run.get("num_workers") or 0) > 1:
            notes.append(f"speed-up of run {run['id']}: {why}")
        rows.append(
            [
                run["id"],
                _short(run.get("name"), 30),
                run.get("state"),
                run.get("num_workers"),
                s.get("dataset") or run.get("dataset_used") or _requested(run),
                target,
                reached,
                after,
                ips,
                speedup,
                _percent(s.get("comm_share")) if s.get("comm_share") is not None else "-",
            ]
        )
    headers = [
        "ID", "NAME", "STATE", "WORKERS", "DATASET", "TARGET", "TIME TO TARGET",
        "ACC AFTER TIME", "IMAGES/S", "SPEED-UP", "COMM",
    ]  # fmt: skip
    warning = _mixed_warning(runs)
    return "\n".join(([warning] if warning else []) + [_table(headers, rows)] + notes)


def _summary_from_series(master: Master, run: dict) -> dict[str, Any]:
    """What the metric series say about a run that has no summary (still running, failed
    or cancelled): the newest validation accuracy and when it was measured on the benchmark
    clock (its date mapped through the `elapsed` series), and the time to target if the
    worker posted one."""
    try:
        body = master.json(
            "get_run_metrics", run["id"], metric_filter=REPORT_METRICS, summarize=2000
        )
    except CliError:
        return {}
    if not isinstance(body, dict):
        return {}
    derived: dict[str, Any] = {}
    ttt = body.get("time_to_target") or []
    if ttt:
        derived["time_to_target"] = float(ttt[-1]["value"])
    acc = body.get("val_accuracy") or []
    if acc:
        derived["final_val_accuracy"] = float(acc[-1]["value"])
        dated = _parse_time(acc[-1].get("date"))
        at = clock_at(body.get("elapsed") or [], dated) if dated else None
        if at is not None:
            derived["elapsed"] = at
    return derived


def _dataset(run: dict) -> str | None:
    """The data set a run actually used (reported), else the one requested; None while
    that is unknown ("auto" requested and nothing reported yet)."""
    s = run.get("summary") or {}
    used = run.get("dataset_used") or s.get("dataset") or run.get("dataset")
    return used if used and used != "auto" else None


def _requested(run: dict) -> str:
    return f"{run['dataset']} (requested)" if run.get("dataset") else "-"


def _cpus(run: dict) -> float | None:
    cpus = run.get("num_cpus")
    return None if cpus is None else float(cpus)


# What must be equal for two runs to be compared, and how each is read from a run.
_SETUP: list[tuple[str, Any]] = [
    ("dataset", _dataset),
    ("task", lambda r: r.get("task") or (r.get("summary") or {}).get("task")),
    ("target", lambda r: r.get("target") or (r.get("summary") or {}).get("target")),
    ("backend", lambda r: r.get("backend") or (r.get("summary") or {}).get("backend")),
    ("CPUs per worker", _cpus),
    ("device", lambda r: "gpu" if r.get("gpu_enabled") else "cpu"),
    ("command", lambda r: (r.get("custom_image_command") or "").strip()),
]


def setup_differences(a: dict, b: dict) -> list[str]:
    """The set-up fields in which runs `a` and `b` differ; [] means they may be compared.

    Why: a speed-up only means something between runs that differ in the number of
    workers and nothing else. A synthetic-data run against a CIFAR-10 run, or runs of
    different tasks, targets, backends or CPUs per worker, give a ratio that measures the
    difference in set-up, not scaling, and a synthetic result must never pass for a
    CIFAR-10 one. An unknown data set therefore differs from everything. The dashboard's
    compare page keeps the same rule in static/dashboard/js/comparable.js.
    """
    differ = []
    for name, of in _SETUP:
        x, y = of(a), of(b)
        if x != y or (name == "dataset" and x is None):
            differ.append(name)
    return differ


def _baseline(run: dict, runs: list[dict]) -> tuple[dict | None, str]:
    """The 1-worker run among `runs` to compare `run` with, else (None, why not)."""
    if run.get("num_workers") == 1:
        return run, ""
    ones = [r for r in runs if r.get("num_workers") == 1]
    if not ones:
        return None, "no 1-worker run listed"
    diffs = [(setup_differences(run, r), r) for r in ones]
    for differ, other in diffs:
        if not differ:
            return other, ""
    if _dataset(run) is None:
        return None, "data set not reported yet"
    nearest = min((d for d, _ in diffs), key=len)
    return None, f"no 1-worker run listed with the same {'/'.join(nearest)}"


def _mixed_warning(runs: list[dict]) -> str:
    """A warning when the runs used different data sets or ran different tasks."""
    sets = sorted({_dataset(r) or "not reported yet" for r in runs})
    tasks = sorted({r.get("task") or "-" for r in runs})
    parts = []
    if len(sets) > 1:
        parts.append(f"different data sets ({', '.join(sets)})")
    if len(tasks) > 1:
        parts.append(f"different tasks ({', '.join(tasks)})")
    if not parts:
        return ""
    text = f"warning: these runs use {' and '.join(parts)}: their results are not comparable."
    if "synthetic" in sets:
        text += " Synthetic results say nothing about CIFAR-10 accuracy."
    return text + " Speed-up only against a 1-worker run of the same set-up."


def _speedup(run: dict, base: dict) -> str:
    if base is run:
        return "1.00x"
    s, b = run.get("summary") or {}, base.get("summary") or {}
    if s.get("time_to_target") and b.get("time_to_target"):
        return f"{float(b['time_to_target']) / float(s['time_to_target']):.2f}x"
    if s.get("images_per_sec") and b.get("images_per_sec"):
        return f"{float(s['images_per_sec']) / float(b['images_per_sec']):.2f}x thr"
    return "-"


# ------------------------------------------------------------------------ entry point


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mlbench",
        description="Run and compare distributed ML benchmarks on an mlbench master.",
        epilog="The master is MLBENCH_URL (or the one `mlbench up` started); the token is "
        "MLBENCH_TOKEN (or MLBENCH_HOME/token).",
    )
    parser.add_argument("--url", help="the master's URL (default: MLBENCH_URL or MLBENCH_HOME/url)")
    parser.add_argument("--token", help="API token (default: MLBENCH_TOKEN or MLBENCH_HOME/token)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    up = sub.add_parser("up", help="start the embedded master on this machine")
    up.add_argument(
        "--detach", action="store_true", help="return once it is up; stop it with `mlbench down`"
    )
    up.add_argument(
        "--port", type=int, help="web server port on 127.0.0.1 (default 8000, or a free one)"
    )
    sub.add_parser("down", help="stop the embedded master and everything it started")
    sub.add_parser("status", help="is the embedded master running, and where")

    run = sub.add_parser("run", help="start a benchmark run")
    run.add_argument("name", help="a name for the run")
    run.add_argument("--workers", type=int, required=True, help="number of worker ranks")
    run.add_argument("--task", default=None, help="benchmark task (default resnet20-cifar10)")
    run.add_argument("--cpus", type=float, default=1.0, help="CPU cores per worker (default 1)")
    run.add_argument(
        "--backend", choices=["mpi", "gloo", "nccl"], help="communication backend (default mpi)"
    )
    run.add_argument(
        "--target", choices=["light", "standard", "paper"], help="accuracy goal (default standard)"
    )
    run.add_argument("--time-budget", type=float, help="seconds of training (accuracy after time)")
    run.add_argument("--max-epochs", type=int, help="stop after this many epochs")
    run.add_argument(
        "--dataset", choices=["auto", "cifar10", "synthetic"], help="data set (default auto)"
    )
    run.add_argument("--time-limit", type=int, help="seconds before the run is stopped as FAILED")
    run.add_argument(
        "--command",
        dest="custom_command",
        help="open division: run this command instead of the reference worker",
    )
    run.add_argument(
        "--all-ranks",
        action="store_true",
        help="with --command: run it on every worker, not only rank 0",
    )
    run.add_argument(
        "--wait", action="store_true", help="show progress until it ends, then the results"
    )

    sub.add_parser("runs", help="list the runs")
    show = sub.add_parser("show", help="details and summary of a run")
    show.add_argument("run", type=int, metavar="RUN")
    show.add_argument("--json", action="store_true", help="print the run as JSON")
    logs = sub.add_parser("logs", help="a run's output (every rank, stdout and stderr)")
    logs.add_argument("run", type=int, metavar="RUN")
    logs.add_argument(
        "--follow", "-f", action="store_true", help="keep printing until the run ends"
    )
    download = sub.add_parser("download", help="a run's metrics as a zip file")
    download.add_argument("run", type=int, metavar="RUN")
    download.add_argument("--output", "-o", help="file to write (default run-RUN-metrics.zip)")
    delete = sub.add_parser("delete", help="delete a run (an active run is stopped first)")
    delete.add_argument("run", type=int, metavar="RUN")
    report = sub.add_parser("report", help="compare runs: time to target, accuracy, speed-up")
    report.add_argument("runs", type=int, nargs="+", metavar="RUN")
    return parser


COMMANDS = {
    "run": cmd_run,
    "runs": cmd_runs,
    "show": cmd_show,
    "logs": cmd_logs,
    "download": cmd_download,
    "delete": cmd_delete,
    "report": cmd_report,
}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command in ("up", "down", "status"):
            return cmd_launcher(args)
        if getattr(args, "workers", 1) is not None and getattr(args, "workers", 1) < 1:
            raise CliError("--workers must be at least 1", EXIT_USAGE)
        master = Master(args.url, args.token)
        return COMMANDS[args.command](args, master)
    except CliError as exc:
        print(f"mlbench: error: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
