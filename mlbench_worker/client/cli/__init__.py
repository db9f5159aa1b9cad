"""The `mlbench` command: start the embedded master, run benchmarks, read their results.

It talks to the master only over the REST API (through `ApiClient`), so the same command
works against the embedded master on this machine and against a cluster's master
(MLBENCH_URL / MLBENCH_TOKEN). `up`, `down` and `status` hand over to the embedded launcher
(`python -m mlbench_master`). Importing this package must stay cheap: no torch, no Django.

This module holds the command line (`build_parser`) and the entry point (`main`, the
`mlbench` console script; `python -m mlbench_worker.client.cli` runs it too). The rest, by purpose:

- `master`: the `Master` the commands call, `CliError` and the exit codes;
- `commands`: one `cmd_*` function per subcommand;
- `waiting`: the progress line of `mlbench run --wait`;
- `clock`: the benchmark clock (the same rule as the dashboard's clock.js);
- `comparison`: the `mlbench report` table and which runs may be compared (comparable.js);
- `accuracy`: whose accuracy a run shows (graded or self-reported) and accuracy after time;
- `series`: `mlbench run` with several seeds or worker counts, and `mlbench series`;
- `results`: `mlbench report --series` / `--plot` and `mlbench download --mllog`;
- `evaluate`: `mlbench evaluate RUN`, a run's predictions graded again here;
- `bundles`: `mlbench export` and `mlbench import`, signed result bundles;
- `board`, `static_board`: `mlbench board`, the results board printed or as a static site;
- `trust`: `mlbench trust add|list|remove`, the keys whose imported results rank, and the
  origin lines of `mlbench show`;
- `study`: `mlbench study create|list|show|cancel|plot|export`, algorithm studies;
- `cluster`: `mlbench cluster create|list|use|dashboard-url|delete|token` (clouds and
  kind, mlbench_worker/client/clusters/); `price_lines`: `mlbench prices list|set|set-local`;
- `formatting`: tables that fit the terminal (and --wide, --json), durations, percentages,
  counted nouns ("1 worker"), API dates.
"""

from __future__ import annotations

import argparse
import os
import sys

from mlbench_worker.client.cli import (
    board,
    bundles,
    cluster,
    evaluate,
    price_lines,
    results,
    study,
    trust,
)
from mlbench_worker.client.cli.commands import (
    cmd_delete,
    cmd_download,
    cmd_launcher,
    cmd_logs,
    cmd_run,
    cmd_runs,
    cmd_show,
)
from mlbench_worker.client.cli.formatting import view_options
from mlbench_worker.client.cli.master import EXIT_USAGE, CliError, Master
from mlbench_worker.client.cli.series import cmd_series, number_list
from mlbench_worker.shared import algorithm_catalogue, catalogue

__all__ = ["COMMANDS", "build_parser", "main"]


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
    up.add_argument("--port", type=int, help="web server port (default 8000, or a free one)")
    up.add_argument(
        "--host",
        help="address the web server listens on (default 127.0.0.1; 0.0.0.0 or this host's "
        "address when workers on other hosts post to it, e.g. a Slurm cluster's nodes)",
    )
    up.add_argument(
        "--cluster",
        choices=("local", "kubernetes", "slurm"),
        help="where the workers run (default: MLBENCH_CLUSTER, else local); slurm submits "
        "each run as a job to the cluster SLURM_CONF (or Slurm's default) names",
    )
    sub.add_parser("down", help="stop the embedded master and everything it started")
    sub.add_parser("status", help="is the embedded master running, and where")

    run = sub.add_parser(
        "run", help="start a benchmark run, or a series of them over seeds and worker counts"
    )
    run.add_argument("name", help="a name for the run")
    run.add_argument(
        "counts",
        nargs="*",
        type=int,
        metavar="WORKERS",
        help="worker counts as the original CLI took them (run NAME 1 2 4: a series)",
    )
    run.add_argument(
        "--workers",
        dest="worker_counts",
        type=number_list,
        metavar="N[,N...]",
        help="number of worker ranks (default: the master's, 2); several (1,2,4): a series",
    )
    run.add_argument(
        "--seeds",
        type=number_list,
        metavar="S[,S...]",
        help=f"the seed every rank starts from (default {catalogue.DEFAULT_SEED}); several "
        "(1,2,3): a series",
    )
    run.add_argument("--repeats", type=int, metavar="N", help="a series over seeds 1 to N")
    run.add_argument(
        "--queue",
        action="store_true",
        help="when another run is active, wait in the master's queue instead of an error",
    )
    run.add_argument(
        "--task",
        default=None,
        help=f"benchmark task, one of {', '.join(catalogue.TASKS)} "
        f"(default {catalogue.DEFAULT_TASK}); the original client's display names "
        "(e.g. 'PyTorch Cifar-10 ResNet-20') and official image names work too",
    )
    run.add_argument(
        "--cpus",
        type=float,
        help="CPU cores per worker (default: the master's, 2; on a local master at most the "
        "machine's cores ÷ workers)",
    )
    run.add_argument(
        "--max-bandwidth",
        type=int,
        metavar="MBIT_S",
        help="network limit of each worker's link in Mbit/s (default: the master's, 1000); "
        "local slots are shaped when the master runs as root",
    )
    run.add_argument(
        "--latency",
        type=float,
        metavar="MS",
        help="delay added each way on every worker's link, in milliseconds (default none)",
    )
    run.add_argument(
        "--algorithm",
        help=f"training algorithm: {', '.join(algorithm_catalogue.ALGORITHMS)} (those the "
        "task and the implementation admit; default allreduce)",
    )
    run.add_argument(
        "--algorithm-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option of the algorithm, e.g. rank=4 (repeatable; the rest keep their "
        "defaults: see the master's GET /api/runs/defaults/)",
    )
    run.add_argument(
        "--algorithm-file",
        metavar="FILE.py",
        help="your own algorithm (one module: NAME, API, OPTIONS and a class deriving from "
        "Algorithm; docs/algorithms.rst): uploaded first (staff token), then the run trains "
        "with it; --algorithm-option sets its declared options",
    )
    run.add_argument(
        "--implementation",
        help="which code trains: reference (our loop, default), torch-ddp (PyTorch "
        "DistributedDataParallel), tensorflow (Keras; needs the workers to have "
        "pip install 'mlbench[tensorflow]'), spark (task 2 on Spark; needs "
        "pip install 'mlbench[spark]' and Java), flink (task 2 on Flink; needs "
        "'mlbench[flink]' in a Python of its own and Java); those the task has",
    )
    run.add_argument(
        "--lr-schedule",
        choices=list(dict.fromkeys(s for t in catalogue.TASKS.values() for s in t.lr_schedules)),
        help="task 1b only: the learning rate after the warm-up, step (default), cosine or "
        "poly (MLPerf's closed ResNet schedule: its MLPerf log passes the closed rules)",
    )
    run.add_argument(
        "--backend",
        type=str.lower,
        choices=["mpi", "gloo", "nccl"],
        help="communication backend, any case (default mpi)",
    )
    run.add_argument(
        "--gpu",
        dest="gpu_enabled",
        action="store_true",
        default=None,
        help="train on the workers' GPUs (--device cuda; the master must offer GPUs: "
        "MLBENCH_MAX_GPUS, or limits.gpu in the chart)",
    )
    run.add_argument(
        "--target", choices=catalogue.goal_names(), help="the task's goal (default standard)"
    )
    run.add_argument(
        "--time-budget",
        type=float,
        help="seconds of training on the benchmark clock, then the final model is evaluated "
        "(accuracy after time; default: the task's budget)",
    )
    run.add_argument("--max-epochs", type=int, help="stop after this many epochs")
    run.add_argument(
        "--test-examples",
        type=int,
        metavar="N",
        help="grade the run on the first N test examples (task 3: validation tokens) instead "
        "of the task's whole test set; ranked apart from whole-set results",
    )
    run.add_argument(
        "--train-examples",
        type=int,
        metavar="N",
        help="train on N examples (task 3: tokens) instead of the data set's whole training "
        "set (an algorithm study's sizing)",
    )
    run.add_argument(
        "--batch-size", type=int, metavar="N", help="the batch per worker (default: the task's)"
    )
    run.add_argument("--dataset", choices=catalogue.dataset_names(), help="data set (default auto)")
    run.add_argument(
        "--time-limit",
        type=int,
        help="seconds before the run is stopped as FAILED (default: the time budget + the "
        "master's margin for start-up and the final evaluation)",
    )
    run.add_argument(
        "--resume-from",
        type=int,
        metavar="RUN",
        help="continue from the last checkpoint of RUN, a FAILED or CANCELLED run; every "
        "option not given is RUN's",
    )
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

    runs = sub.add_parser("runs", help="list the runs (a queued run with its place: QUEUED #2)")
    runs.add_argument(
        "--last", type=int, metavar="N", help="only the N newest runs (default: every run)"
    )
    view_options(runs, "print the runs as the API lists them (GET /api/runs/)")
    series = sub.add_parser("series", help="list run series, show one, or cancel one")
    series.add_argument("series", type=int, nargs="?", metavar="ID")
    series.add_argument(
        "--cancel", action="store_true", help="drop its queued runs, cancel its active one"
    )
    view_options(series, "print the series (or the list) as the API answers")
    show = sub.add_parser("show", help="details and summary of a run")
    show.add_argument("run", type=int, metavar="RUN")
    view_options(show, "print the run as JSON")
    logs = sub.add_parser("logs", help="a run's output (every rank, stdout and stderr)")
    logs.add_argument("run", type=int, metavar="RUN")
    logs.add_argument(
        "--follow", "-f", action="store_true", help="keep printing until the run ends"
    )
    download = sub.add_parser(
        "download", help="a run's metrics as a zip file, or its MLPerf-format log (--mllog)"
    )
    download.add_argument("run", type=int, nargs="?", metavar="RUN")
    download.add_argument(
        "--output",
        "-o",
        help="file to write (default run-RUN-metrics.zip, run-RUN-mllog.txt, series-ID-mllog.zip)",
    )
    download.add_argument(
        "--mllog",
        action="store_true",
        help="the result log in MLPerf Training's format (:::MLLOG lines) instead",
    )
    download.add_argument(
        "--series", type=int, metavar="ID", help="with --mllog: a series' logs (result_N.txt)"
    )
    download.add_argument(
        "--algorithm",
        action="store_true",
        help="the source of the uploaded algorithm the run trained with (NAME-SHA.py)",
    )
    delete = sub.add_parser(
        "delete",
        help="delete a run, or a series with all its runs (an active run is stopped first)",
    )
    delete.add_argument("run", type=int, nargs="?", metavar="RUN")
    delete.add_argument(
        "--series", type=int, metavar="ID", help="delete series ID with its runs and results"
    )
    report = sub.add_parser(
        "report", help="compare runs or a series' statistics: time to target, speed-up, charts"
    )
    report.add_argument("runs", type=int, nargs="*", metavar="RUN")
    report.add_argument(
        "--series", type=int, metavar="ID", help="a series' statistics per worker count"
    )
    report.add_argument(
        "--plot", metavar="FILE", help="draw a chart into FILE.png or FILE.svg instead"
    )
    report.add_argument(
        "--chart",
        choices=("accuracy", "speedup", "time-split", "cost"),
        default="accuracy",
        help="which chart --plot draws (default accuracy; speedup and cost need --series)",
    )
    view_options(
        report,
        "print the comparison as JSON: each run's numbers, the notes (with --series: the "
        "statistics as the API computes them)",
    )
    report.add_argument(
        "--across-implementations",
        action="store_true",
        help="speed-ups against 1-worker runs of another implementation too, where a run has "
        "none of its own (labelled cross-implementation)",
    )
    evaluate.add_parser(sub)
    bundles.add_parsers(sub)
    board.add_parser(sub)
    trust.add_parser(sub)
    study.add_parser(sub)
    cluster.add_parser(sub)
    price_lines.add_parser(sub)
    return parser


COMMANDS = {
    "run": cmd_run,
    "runs": cmd_runs,
    "show": cmd_show,
    "logs": cmd_logs,
    "series": cmd_series,
    "download": cmd_download,
    "delete": cmd_delete,
    "report": results.cmd_report,
    "evaluate": evaluate.cmd_evaluate,
    "export": bundles.cmd_export,
    "import": bundles.cmd_import,
    "board": board.cmd_board,
    "trust": trust.cmd_trust,
    "study": study.cmd_study,
    "prices": price_lines.cmd_prices,
}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command in ("up", "down", "status"):
            return cmd_launcher(args)
        if args.command == "cluster":  # no master yet: the command may be making one
            return cluster.cmd_cluster(args)
        if args.command == "prices":  # its input is checked before a master is looked for
            return price_lines.cmd_prices(args, lambda: Master(args.url, args.token))
        if getattr(args, "workers", None) is not None and args.workers < 1:
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
