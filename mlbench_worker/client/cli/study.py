# Over 400 lines: the six verbs of `mlbench study` and the tables and chart they share.
"""`mlbench study create|list|show|cancel|plot|export`: algorithm studies (docs/studies.rst)
from the command line.

Every number shown is the master's (GET /api/studies/<id>/: the cells' medians, the
ratios, the scores, the profiles and the held-out gate, computed by
mlbench_master/studies/outcomes.py and results/study_score.py); this module lays them out
and draws the profiles' steps as the API gives them, never recomputes them. A miss is an
infinite time: shown as "∞". The export is `mlbench export`'s (bundles.py), pointed at the
study's bundle.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from mlbench_worker.client.cli import bundles
from mlbench_worker.client.cli.algorithm_file import uploaded
from mlbench_worker.client.cli.formatting import Column, View, fit, plural, size, view_options
from mlbench_worker.client.cli.master import (
    EXIT_CONFLICT,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_RUN_FAILED,
    EXIT_USAGE,
    CliError,
    Master,
)
from mlbench_worker.client.cli.series import number_list
from mlbench_worker.shared import algorithm_catalogue, study_suite

INFINITE = "∞"  # a miss: the time (and bytes, epochs) to target is infinite
POLL_SECONDS = 5.0


def algorithm_list(text: str) -> list[Any]:
    """argparse type of --algorithms: "allreduce,powersgd:rank=2,warmup_steps=0,topk:
    density=0.1" -> ["allreduce", {"algorithm": "powersgd", "options": {"rank": "2",
    "warmup_steps": "0"}}, ...]: a name starts an algorithm, its options follow a colon
    (separated by commas or colons); the master types and checks the values."""
    found: list[dict[str, Any]] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, colon, rest = part.partition(":")
        if "=" in name:  # KEY=VALUE: one more option of the algorithm before it
            if colon or not found:
                raise argparse.ArgumentTypeError(
                    f"{part!r}: an option needs its algorithm first, e.g. powersgd:rank=2"
                )
            name, rest = "", part
        else:
            found.append({"algorithm": name.strip(), "options": {}})
        for option in (o.strip() for o in rest.split(":") if o.strip()):
            key, equals, value = option.partition("=")
            if not equals or not key.strip():
                raise argparse.ArgumentTypeError(
                    f"{option!r}: give an option as KEY=VALUE, e.g. powersgd:rank=2"
                )
            found[-1]["options"][key.strip()] = value.strip()
    if not found:
        raise argparse.ArgumentTypeError("give at least one algorithm, e.g. allreduce,powersgd")
    return [a if a["options"] else a["algorithm"] for a in found]


def _names(text: str) -> list[str]:  # --workloads, --conditions: the master checks them
    return [p.strip() for p in text.split(",")]


def add_parser(sub: Any) -> None:
    study = sub.add_parser(
        "study", help="algorithm studies: algorithms x workloads x network conditions, scored"
    )
    verbs = study.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True
    create = verbs.add_parser("create", help="queue a study (every cell checked first)")
    create.add_argument("name", help="a name for the study (its runs are named after it)")
    create.add_argument(
        "--algorithms", type=algorithm_list, default=[], metavar="A[:K=V...],...",
        help="the algorithms compared, e.g. allreduce,powersgd:rank=2,topk:density=0.1 "
        f"(built in: {', '.join(algorithm_catalogue.ALGORITHMS)})",
    )  # fmt: skip
    create.add_argument(
        "--algorithm-file", metavar="FILE.py",
        help="your own algorithm (docs/algorithms.rst): uploaded first (staff token), then "
        "compared beside --algorithms",
    )  # fmt: skip
    create.add_argument(
        "--algorithm-option", action="append", default=[], metavar="KEY=VALUE",
        help="an option of --algorithm-file's algorithm (repeatable)",
    )  # fmt: skip
    create.add_argument(
        "--workloads", type=_names, metavar="W,...",
        help=f"the suite's workloads (default all: {', '.join(study_suite.WORKLOADS)})",
    )  # fmt: skip
    create.add_argument(
        "--conditions", type=_names, metavar="C,...",
        help=f"network conditions (default all: {', '.join(study_suite.CONDITIONS)})",
    )  # fmt: skip
    create.add_argument("--seeds", type=number_list, metavar="S,...",
                        help="each cell's seeds (default 1)")  # fmt: skip
    create.add_argument("--workers", type=int, metavar="N", help="workers a run (default 2)")
    create.add_argument("--cpus", type=float, metavar="C",
                        help="CPUs per worker (default: their share)")  # fmt: skip
    create.add_argument(
        "--no-held-out", dest="held_out", action="store_false", default=None,
        help="draw no held-out variants (the score then has no held-out gate)",
    )  # fmt: skip
    create.add_argument(
        "--no-reuse", dest="reuse", action="store_false", default=None,
        help="run every cell, even one an earlier study ran the same way",
    )  # fmt: skip
    create.add_argument("--wait", action="store_true",
                        help="follow it until every run has its outcome")  # fmt: skip
    create.add_argument("--json", action="store_true", help="print the master's answer as JSON")
    listed = verbs.add_parser("list", help="the studies, newest first")
    view_options(listed, "print the studies as the API lists them")
    show = verbs.add_parser("show", help="a study's cells, scores and held-out gate")
    view_options(show, "print the study as the API answers (GET /api/studies/ID/)")
    cancel = verbs.add_parser("cancel", help="drop its queued runs, cancel its active one")
    plot = verbs.add_parser("plot", help="draw the performance profiles per condition")
    plot.add_argument("--output", "-o", required=True, metavar="FILE", help="FILE.png or .svg")
    export = verbs.add_parser("export", help="write the study as one signed result bundle")
    export.add_argument("--output", "-o",
                        help="file to write (default mlbench-study-ID-bundle.zip)")  # fmt: skip
    for verb in (show, cancel, plot, export):
        verb.add_argument("study", type=int, metavar="ID")


def cmd_study(args: argparse.Namespace, master: Master) -> int:
    verbs = {"create": _create, "list": _list, "show": _show, "cancel": _cancel,
             "plot": _plot, "export": _export}  # fmt: skip
    return verbs[args.verb](args, master)


def _get(master: Master, study_id: int) -> dict[str, Any]:
    """The study; a 404 says which study and the command that lists them."""
    try:
        return master.json("get_study", study_id)
    except CliError as exc:
        if exc.code != EXIT_NOT_FOUND:
            raise
        missing = f"study {study_id} does not exist (`mlbench study list` lists them)"
        raise CliError(missing, EXIT_NOT_FOUND) from None


def _create(args: argparse.Namespace, master: Master) -> int:
    algorithms = list(args.algorithms)
    options: dict[str, str] = {}
    for item in args.algorithm_option:
        key, equals, value = item.partition("=")
        if not equals or not key.strip():
            raise CliError(f"--algorithm-option {item!r}: give KEY=VALUE", EXIT_USAGE)
        options[key.strip()] = value.strip()
    if options and not args.algorithm_file:
        raise CliError(
            "--algorithm-option sets --algorithm-file's options; a built-in algorithm's go "
            "in --algorithms, e.g. powersgd:rank=2",
            EXIT_USAGE,
        )
    outside = uploaded(argparse.Namespace(algorithm_file=args.algorithm_file, algorithm=None),
                       master)  # fmt: skip
    if outside:
        algorithms.append({"algorithm": outside["name"], "options": options,
                           "algorithm_source": outside["sha256"]})  # fmt: skip
    if not algorithms:
        raise CliError("give the algorithms to compare: --algorithms allreduce,powersgd",
                       EXIT_USAGE)  # fmt: skip
    body = master.json(
        "create_study", args.name, algorithms, workloads=args.workloads,
        conditions=args.conditions, seeds=args.seeds, num_workers=args.workers,
        num_cpus=args.cpus, held_out=args.held_out, reuse=args.reuse,
    )  # fmt: skip
    if args.json and not args.wait:
        print(json.dumps(body, indent=2, sort_keys=True))
        return EXIT_OK
    reused = sum(c["reused"] for c in body["cells"])
    print(
        f"study {body['id']} {body['name']!r}: {plural(len(body['cells']), 'cell')}, "
        f"{plural(body['runs']['total'], 'run')} queued"
        + (f", {plural(reused, 'cell')} reused from earlier studies" if reused else "")
    )
    print("algorithms: " + "; ".join(a["label"] for a in body["algorithms"]))
    if not args.wait:
        print(f"follow it with `mlbench study show {body['id']}`; cancel it: "
              f"`mlbench study cancel {body['id']}`")  # fmt: skip
        return EXIT_OK
    return _wait(args, master, body["id"])


def _wait(args: argparse.Namespace, master: Master, study_id: int) -> int:
    """A line each time the study's counts change, until every run has its outcome."""
    said = ""
    try:
        while True:
            body = _get(master, study_id)
            runs = body["runs"]
            line = (f"study {study_id}: {runs['ended']} of {plural(runs['total'], 'run')} "
                    f"ended, {runs['queued']} queued, {body['pending_runs']} pending")  # fmt: skip
            if line != said:
                print(line, flush=True)
                said = line
            if body["pending_runs"] == 0:
                break
            time.sleep(POLL_SECONDS)
    except KeyboardInterrupt:
        print(f"\nstopped waiting; study {study_id} goes on. Cancel it with "
              f"`mlbench study cancel {study_id}`.", file=sys.stderr)  # fmt: skip
        return 130
    if args.json:
        print(json.dumps(body, indent=2, sort_keys=True))
    else:
        print()
        print(show_text(body, View.of(args)))
    return EXIT_RUN_FAILED if body["state"] == "cancelled" else EXIT_OK


STUDY_COLUMNS = [
    Column("ID", lambda s: s["id"]),
    Column("NAME", lambda s: " ".join(s["name"].split()), most=40, least=12),
    Column("STATE", lambda s: s["state"]),
    Column("ALGORITHMS", lambda s: "; ".join(a["label"] for a in s["algorithms"]),
           brief=lambda s: ", ".join(a["algorithm"] or "?" for a in s["algorithms"]),
           most=40, least=12, drop=2),
    Column("WORKLOADS", lambda s: ",".join(s["workloads"]), most=30, least=10, drop=1),
    Column("CONDITIONS", lambda s: ",".join(s["conditions"]), most=30, least=10, drop=5),
    Column("SEEDS", lambda s: ",".join(map(str, s["seeds"])), most=12, least=6, drop=3),
    Column("RUNS", lambda s: f"{s['runs']['ended']}/{s['runs']['total']}"),
    Column("CREATED", lambda s: (s.get("created_at") or "")[:16].replace("T", " "), drop=4),
]  # fmt: skip


def _list(args: argparse.Namespace, master: Master) -> int:
    listed = master.json("list_studies")
    if args.json:
        print(json.dumps(listed, indent=2, sort_keys=True))
    elif not listed:
        print("no studies yet: start one with `mlbench study create NAME --algorithms "
              "allreduce,powersgd`")  # fmt: skip
    else:
        print(fit(STUDY_COLUMNS, listed, View.of(args)))
    return EXIT_OK


def seconds_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def _median(cell: dict[str, Any], key: str, shown: Any) -> str:
    """A cell's median: pending while a run has no outcome; ∞ for a miss."""
    median = cell.get("median")
    if median is None:
        return "pending"
    value = median.get(key)
    if value is None:
        return INFINITE if median["time_to_target"] is None or key == "time_to_target" else "-"
    return shown(value)


def _condition(cell: dict[str, Any]) -> str:
    return f"{cell['condition']} (held-out)" if cell["variant"] else cell["condition"]


def _ratio(ratios: dict[tuple[str, str, str], Any], cell: dict[str, Any]) -> str:
    key = (cell["algorithm"], cell["workload"], cell["condition"])
    r = "-" if cell["variant"] or key not in ratios else ratios[key]
    return INFINITE if r is None else r if r == "-" else f"{r:.2f}"


def _runs_text(cell: dict[str, Any]) -> str:
    return ", ".join(
        f"{r['seed']}: " + (seconds_text(r["time_to_target"]) if r["status"] == "reached"
                            else r["status"] if r["status"] == "pending" else INFINITE)
        for r in cell["runs"]
    )  # fmt: skip


def briefs(body: dict[str, Any]) -> dict[str, str]:
    """Each algorithm's label (every option) -> its name with the options that differ from
    the defaults (and an uploaded file's short hash): the default view's ALGORITHM."""
    return {
        a["label"]: algorithm_catalogue.describe(a["algorithm"], a["options"])
        + (f" [uploaded {a['source'][:12]}]" if a.get("source") else "")
        for a in body["algorithms"]
    }


def cell_columns(ratios: dict[tuple[str, str, str], Any], brief: dict[str, str]) -> list[Column]:
    """The table of cells: one row per (algorithm, workload, condition), a held-out variant
    under its condition marked "(held-out)"; SERIES is the cell's series (`mlbench series
    ID` shows its runs)."""
    return [
        Column("SERIES", lambda c: c["series"] or "-"),
        Column("WORKLOAD", lambda c: c["workload"]),
        Column("CONDITION", _condition),
        Column("ALGORITHM", lambda c: c["algorithm"], lambda c: brief.get(c["algorithm"]),
               most=36, least=12),
        Column("TIME TO TARGET", lambda c: _median(c, "time_to_target", seconds_text)),
        Column("RATIO", lambda c: _ratio(ratios, c), drop=3),
        Column("BYTES TO TARGET", lambda c: _median(c, "bytes_to_target", size),
               brief_header="BYTES", drop=2),
        Column("EPOCHS", lambda c: _median(c, "epochs_to_target", lambda e: f"{e:g}"), drop=1),
        Column("REACHED", lambda c: f"{c['median']['reached']}/{c['median']['seeds']}"
               if c.get("median") else f"-/{len(c['runs'])}"),
        Column("REUSED", lambda c: f"study {c['reused_from']}" if c["reused"] else "-", drop=4),
        Column("BUDGET", lambda c: f"{c['budget']:g} s", wide=True),
        Column("RUNS (SEED: TIME)", _runs_text, wide=True),
    ]  # fmt: skip


def _ordered(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Cells by workload, then condition (the variant after the base conditions), then
    algorithm, each in the study's order: the algorithms compared sit together."""
    w = {n: i for i, n in enumerate(body["workloads"])}
    c = {n: i for i, n in enumerate(body["conditions"])}
    a = {x["label"]: i for i, x in enumerate(body["algorithms"])}
    return sorted(body["cells"], key=lambda x: (
        w.get(x["workload"], 99), x["variant"], c.get(x["condition"], 99),
        a.get(x["algorithm"], 99)))  # fmt: skip


def show_text(body: dict[str, Any], view: View) -> str:
    """`mlbench study show`: the study's line, its cells, then its score or what is pending."""
    held = body.get("held_out")
    head = (
        f"study {body['id']} {body['name']!r} ({body['state']}): suite {body['suite_version']}, "
        f"{plural(body['num_workers'], 'worker')} x {plural(body['num_cpus'], 'CPU')}, "
        f"{body['cluster']} cluster, seeds {','.join(map(str, body['seeds']))}; "
        + (f"held-out variants drawn from seed {held['seed']}, run at {held['condition']}"
           if held else "no held-out variants")
    )  # fmt: skip
    score = body.get("score")
    ratios = {(r["algorithm"], r["workload"], r["condition"]): r["ratio"]
              for r in (score or {}).get("ratios", [])}  # fmt: skip
    brief = briefs(body)
    lines = [view.say(head), fit(cell_columns(ratios, brief), _ordered(body), view)]
    if score is None:
        lines.append(view.say(
            f"pending {plural(body['pending_runs'], 'run')}: the score comes once every run "
            "has its outcome" if body["pending_runs"] else "no score: the study has no runs"
        ))  # fmt: skip
        return "\n".join(lines)
    conditions = list(score["by_condition"])
    rows = [a["label"] for a in body["algorithms"]]
    columns = [Column("ALGORITHM", lambda r: r, lambda r: brief[r], most=36, least=12)]
    columns += [Column(c.upper(), lambda r, c=c: f"{score['by_condition'][c][r]:.4f}")
                for c in conditions]  # fmt: skip
    columns.append(Column("OVERALL", lambda r: f"{score['overall'][r]:.4f}"))
    lines += ["", view.say(
        f"score (AlgoPerf performance profiles, tau_max {score['tau_max']:g}): the area under "
        "each condition's profile, 1 for the best on every workload, 0 for reaching none "
        f"within {score['tau_max']:g}x the best; overall: the mean over the conditions"
    ), fit(columns, rows, view)]  # fmt: skip
    lines.append(view.say(gate_text(body, score)))
    return "\n".join(lines)


def gate_text(body: dict[str, Any], score: dict[str, Any]) -> str:
    if body.get("held_out") is None or not score.get("held_out"):
        return "held-out gate: none (the study drew no held-out variants)"
    failed = [f"{p['algorithm']} on {p['workload']}" for p in score["held_out_passed"]
              if not p["passed"]]  # fmt: skip
    if not failed:
        return "held-out gate: every algorithm passed on every workload"
    return (
        f"held-out gate: failed: {'; '.join(failed)} (its variant missed, or took more than "
        f"{score['tau_max']:g}x the best variant time: its time there counts as {INFINITE} "
        "in every condition)"
    )


def _show(args: argparse.Namespace, master: Master) -> int:
    body = _get(master, args.study)
    if args.json:
        print(json.dumps(body, indent=2, sort_keys=True))
    else:
        print(show_text(body, View.of(args)))
    return EXIT_OK


def _cancel(args: argparse.Namespace, master: Master) -> int:
    _get(master, args.study)
    try:
        body = master.json("cancel_study", args.study)
    except CliError as exc:
        if exc.code != EXIT_CONFLICT:
            raise
        raise CliError(
            f"study {args.study} has no queued or active run left to cancel: its runs have "
            "ended and their results stay",
            EXIT_CONFLICT,
        ) from None
    ended = body["runs"]["ended"]
    print(f"study {args.study} cancelled: nothing of it is queued or active now; "
          f"{plural(ended, 'run')} ended (a cancelled run counts as a miss)")  # fmt: skip
    return EXIT_OK


def profile_figure(body: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The performance profiles of a scored study: one panel per condition, rho(tau) of each
    algorithm as the API's right-continuous steps from tau 1 to tau_max; and what was
    drawn (each curve's points), stored in the file's metadata."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise CliError("drawing needs matplotlib: pip install matplotlib (or pip install "
                       "mlbench[master])", EXIT_USAGE) from None  # fmt: skip
    score = body["score"]
    tau_max = float(score["tau_max"])
    conditions = list(score["profiles"])
    cols = min(len(conditions), 3)
    rows = math.ceil(len(conditions) / cols)
    fig = Figure(figsize=(4.2 * cols, 3.4 * rows + 1.0), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False, sharey=True).ravel()
    drawn: dict[str, Any] = {"tau_max": tau_max, "profiles": {}}
    for ax, condition in zip(axes, conditions, strict=False):
        drawn["profiles"][condition] = {}
        for label, steps in score["profiles"][condition].items():
            xs = [float(t) for t, _ in steps] + [tau_max]
            ys = [float(r) for _, r in steps] + [float(steps[-1][1])]
            ax.step(xs, ys, where="post", label=f"{label}: overall {score['overall'][label]:.3f}")
            drawn["profiles"][condition][label] = [list(p) for p in zip(xs, ys, strict=True)]
        ax.set_title(condition, fontsize=10)
        ax.set_xlim(1.0, tau_max)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("tau (time / best time)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("rho (share of workloads)")
    for ax in axes[len(conditions) :]:
        ax.set_visible(False)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 2),
               fontsize=8)  # fmt: skip
    fig.suptitle(f"study {body['id']} {body['name']}: performance profiles")
    return fig, drawn


def _plot(args: argparse.Namespace, master: Master) -> int:
    fmt = Path(args.output).suffix.lower().lstrip(".")
    if fmt not in ("png", "svg"):
        raise CliError(f"--output {args.output}: the file must end in .png or .svg", EXIT_USAGE)
    body = _get(master, args.study)
    if body.get("score") is None:
        raise CliError(
            f"study {args.study} has no score yet: {plural(body['pending_runs'], 'run')} "
            f"pending (`mlbench study show {args.study}`)",
            EXIT_CONFLICT,
        )
    fig, drawn = profile_figure(body)
    out = io.BytesIO()
    described = json.dumps({"chart": "performance-profiles", **drawn}, separators=(",", ":"))
    fig.savefig(out, format=fmt, dpi=120,
                metadata={"Title": fig.get_suptitle(), "Description": described})  # fmt: skip
    Path(args.output).write_bytes(out.getvalue())
    print(f"wrote {args.output} ({plural(len(out.getvalue()), 'byte')}): the performance "
          f"profiles of {plural(len(drawn['profiles']), 'condition')}")  # fmt: skip
    return EXIT_OK


class _StudyBundle:
    """The master as `mlbench export` (bundles.cmd_export) uses it, asked for a study's
    bundle: that command's download (written under a temporary name, renamed once whole,
    its manifest checked) is reused as it is; only the path it asks for is the study's."""

    def __init__(self, master: Master, study_id: int) -> None:
        self.master, self.study_id = master, study_id

    def call(self, method: str, verb: str, path: str, **kwargs: Any) -> Any:
        try:
            return self.master.call(method, verb, f"studies/{self.study_id}/bundle/", **kwargs)
        except CliError as exc:
            said = str(exc).split("; wait for it to end or stop it with")[0]  # not a run's 409
            if exc.code == EXIT_NOT_FOUND:  # the study exists (checked first): the path not
                said = (f"the master at {self.master.url} has no bundles of studies (GET "
                        f"/api/studies/{self.study_id}/bundle/ is not found): update it")  # fmt: skip
            elif exc.code == EXIT_CONFLICT and "export it again" not in said:
                said += (f"; wait for study {self.study_id} to end, or cancel what is left of "
                         f"it (mlbench study cancel {self.study_id}), then export it again")  # fmt: skip
            raise CliError(said, exc.code) from None


def _export(args: argparse.Namespace, master: Master) -> int:
    _get(master, args.study)
    output = args.output or f"mlbench-study-{args.study}-bundle.zip"
    asked = argparse.Namespace(runs=[], series=args.study, output=output)
    return bundles.cmd_export(asked, _StudyBundle(master, args.study))  # type: ignore[arg-type]
