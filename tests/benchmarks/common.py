"""Shared helpers for `make bench`: the machine's description and the result files.

Each bench_*.py measures its contenders side by side in one process run and calls
`write_results`, with the run's ratios and their goals (`ratio`); `python
tests/benchmarks/common.py --collect DIR` prints every table and gathers every ratio into
one table (RATIOS.md and ratios.rst in DIR, and copied between the `.. ratios-begin` and
`.. ratios-end` comments of docs/results.rst). Nothing here asserts a time: goals are
reported next to the measurements.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from mlbench_master.cluster.mpirun import launcher_argv
from mlbench_worker.training.environment import cpu_model, memory_gib

RESULTS_DIR = Path(os.environ.get("MLBENCH_BENCH_DIR", "bench-results"))
REPO = Path(__file__).resolve().parents[2]
MPIRUN = os.path.join(os.path.dirname(sys.executable), "mpirun")
T = TypeVar("T")


def launcher_prefix(
    ranks: int, hosts: list[str] | None = None, agent: str | None = None
) -> list[str]:
    """The mpirun prefix a benchmark starts its ranks with: the product's builder
    (`launcher_argv`: `--bind-to none`, oversubscribed on this machine, or one slot per host
    through `agent`) with this venv's mpirun, and two explicit differences from a run's
    command: no output tagging (the benchmarks read their RESULT lines as printed) and no
    -x forwarding (the ranks get mpirun's own environment, `mpi_env`)."""
    return launcher_argv(ranks, hosts, mpirun=MPIRUN, agent=agent, tag_output=False, forward=())


def mpi_env(**extra: str) -> dict:
    """The environment for ranks a benchmark starts with mpirun: this checkout and venv,
    root allowed (the benchmark machines run as root), never a master to report to."""
    env = dict(os.environ)
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = str(REPO)
    env.pop("MLBENCH_MASTER_URL", None)
    env.update(extra)
    return env


def bounded(argv: list[str], timeout: float, **kwargs) -> tuple[int | str, str]:  # noqa: ANN003
    """Run `argv` in a session of its own: (exit code, or "over N s", and its output). On the
    limit its whole process group goes (mpirun's ranks too), so nothing left behind competes
    with the next measurement (on a lent GPU, for the device itself)."""
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True, **kwargs,
    )  # fmt: skip
    try:
        output, _ = proc.communicate(timeout=timeout)
        return proc.returncode, output
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        return f"over {timeout:.0f} s", output


def worker_summary(argv: list[str], home: Path, metrics: Path, timeout: float) -> dict:
    """Run `argv` (mpirun and the reference worker writing to `metrics`) with one torch
    thread per rank and the data under `home`; the summary the worker wrote last."""
    env = mpi_env(MLBENCH_DATA_DIR=str(home / "data"), OMP_NUM_THREADS="1")
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    if done.returncode:
        raise RuntimeError(done.stdout[-2000:] + done.stderr[-2000:])
    for line in metrics.read_text().splitlines()[::-1]:
        record = json.loads(line)
        if record.get("type") == "summary":
            return record
    raise RuntimeError(f"no summary in {metrics}")


def plain_loop(
    model,  # noqa: ANN001
    optimizer,  # noqa: ANN001
    xs: list,
    ys: list,
    amp_dtype=None,  # noqa: ANN001
    scaler: bool = False,
) -> Callable[[], float]:
    """A plain PyTorch training loop over ready-made batches (the reference our loop is
    measured against): a function that runs it once and returns its images/s. On a GPU the
    batches are on the device, mixed precision is `amp_dtype` (with torch's gradient scaler
    when `scaler`, as float16 needs), and the clock stops when the device is done."""
    import torch
    import torch.nn.functional as F

    device = xs[0].device
    grad_scaler = torch.amp.GradScaler(device.type) if scaler else None

    def run() -> float:
        model.train()
        start = time.perf_counter()
        for x, y in zip(xs, ys, strict=True):
            optimizer.zero_grad()
            with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                loss = F.cross_entropy(model(x), y)
            if grad_scaler is not None:
                grad_scaler.scale(loss).backward()
                grad_scaler.step(optimizer)
                grad_scaler.update()
            else:
                loss.backward()
                optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return sum(len(y) for y in ys) / (time.perf_counter() - start)

    return run


def interleaved(
    ours: Callable[[], T], plain: Callable[[], T], rounds: int, warm_up: bool = True
) -> tuple[list[T], list[T]]:
    """Both contenders' results, round after round after one warm-up each, each going first
    in turn, so load changes on a shared machine hit both alike. `warm_up=False` for
    contenders that start a fresh process each time: nothing in them is left warm."""
    if warm_up:
        ours(), plain()
    a: list[T] = []
    b: list[T] = []
    for i in range(rounds):
        if i % 2:
            a.append(ours())
            b.append(plain())
        else:
            b.append(plain())
            a.append(ours())
    return a, b


def one_form(doc: str) -> None:
    """The command line of a bench that has one form only: `make bench QUICK=1` passes
    --quick to every bench, and this one measures at its full size either way (its point is
    the size: a million points, ten thousand runs), which its --help says."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="accepted; this bench has one form")
    parser.parse_args()


def machine() -> dict:
    """What the numbers were measured on."""
    info = {
        "host": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model(),
        "memory_gib": memory_gib(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    try:
        import torch

        info["torch"] = torch.__version__
        info["cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:
        pass
    return info


def markdown_table(headers: list[str], rows: list[list]) -> str:
    def cell(v: object) -> str:
        return f"{v:.3g}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def ratio(measure: str, value: float | None, goal: str, note: str = "") -> dict:
    """One ratio of a bench for the summary table: `value` (None: not measured, with why in
    `note`) against `goal`, written ">= 0.97" or "<= 300 ms" and the like; met is decided
    here from the goal's words, so every bench states its goal the same way."""
    op, _, bound = goal.partition(" ")
    limit = float(bound.split()[0])
    met = None if value is None else (value >= limit if op == ">=" else value <= limit)
    return {"measure": measure, "value": value, "goal": goal, "met": met, "note": note}


def write_results(
    name: str,
    title: str,
    headers: list[str],
    rows: list[list],
    data: dict,
    ratios: list[dict] | None = None,
) -> Path:
    """Write NAME.json and NAME.md under the results folder and print the table; `ratios`
    (from `ratio`) go into the summary table that `collect` makes."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    payload = {
        "name": name,
        "title": title,
        "machine": machine(),
        "load_average": os.getloadavg(),
        "headers": headers,
        "rows": rows,
        "data": data,
        "ratios": ratios or [],
    }
    (RESULTS_DIR / f"{name}.json").write_text(json.dumps(payload, indent=2, default=str))
    md = f"## {title}\n\n{markdown_table(headers, rows)}\n\nMachine: {_machine_line(payload['machine'])}\n"
    (RESULTS_DIR / f"{name}.md").write_text(md)
    print(md)
    return RESULTS_DIR / f"{name}.md"


def _machine_line(m: dict) -> str:
    return f"{m['cpu_model']}, {m['cpu_count']} cores, {m['memory_gib']} GiB, {m['platform']}, Python {m['python']}, torch {m.get('torch', '-')}"


def collect(folder: Path, docs: Path | None = REPO / "docs" / "results.rst") -> None:
    """Write every table in `folder` together to SUMMARY.md, and every ratio into one table
    (RATIOS.md, ratios.rst, and into `docs` between its markers when it has them)."""
    own = {"SUMMARY.md", "RATIOS.md"}
    parts = [p.read_text() for p in sorted(folder.glob("*.md")) if p.name not in own]
    summary = "# mlbench benchmarks\n\n" + "\n".join(parts)
    (folder / "SUMMARY.md").write_text(summary)
    runs = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    rows = ratio_rows(runs)
    machines = sorted({_machine_line(r["machine"]) for r in runs if r.get("ratios")})
    headers = ["bench", "ratio", "measured", "goal", "met", "load (1 min)", "note"]
    md = "## Every ratio and its goal\n\n" + markdown_table(headers, rows) + "\n\n"
    md += "".join(f"Machine: {m}\n" for m in machines)
    (folder / "RATIOS.md").write_text(md)
    rst = rst_table(headers, rows, machines)
    (folder / "ratios.rst").write_text(rst)
    print(md)
    if docs is not None and docs.exists():
        copied = replace_between(docs.read_text(), ".. ratios-begin", ".. ratios-end", rst)
        if copied is not None:
            docs.write_text(copied)
            print(f"The ratios table copied into {docs}")
    print(f"\nAll results: {folder / 'SUMMARY.md'}, {folder / 'RATIOS.md'} (JSON beside them)")


def ratio_rows(runs: list[dict]) -> list[list]:
    """One row per ratio of every bench run, in the benches' order."""
    rows = []
    for run in runs:
        load = run.get("load_average") or [None]
        for r in run.get("ratios", []):
            value = "-" if r["value"] is None else f"{r['value']:.3g}"
            met = {True: "yes", False: "NO", None: "not measured"}[r["met"]]
            at = "-" if load[0] is None else f"{load[0]:.1f}"
            rows.append([run["name"], r["measure"], value, r["goal"], met, at, r["note"]])
    return rows


def rst_table(headers: list[str], rows: list[list], machines: list[str]) -> str:
    """The ratios as an RST list-table (cells of any width), with the machines below."""
    lines = [".. list-table::", "   :header-rows: 1", ""]
    for row in [headers, *rows]:
        cells = [str(c).replace("|", "/") or "-" for c in row]
        lines.append(f"   * - {cells[0]}")
        lines += [f"     - {c}" for c in cells[1:]]
    lines.append("")
    lines += [f"Machine: {m}" for m in machines] or ["No ratio was measured."]
    return "\n".join(lines) + "\n"


def replace_between(text: str, begin: str, end: str, body: str) -> str | None:
    """`text` with what lies between the lines `begin` and `end` replaced by `body`; None
    when either marker is missing."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.strip() == begin]
    ends = [i for i, line in enumerate(lines) if line.strip() == end]
    if not starts or not ends or ends[0] < starts[0]:
        return None
    return "".join(lines[: starts[0] + 1]) + "\n" + body + "\n" + "".join(lines[ends[0] :])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--collect", type=Path, required=True)
    collect(parser.parse_args().collect)
    sys.exit(0)
