"""`python -m mlbench_master COMMAND`: the embedded master and its service processes.

User commands: `up [--detach] [--port N] [--host ADDR] [--cluster local|kubernetes|slurm]`, `down`, `status` (mlbench_master/embedded/).
The others are what `up` starts (and what the Kubernetes master's containers start the same
way; mlbench_master/processes.py): `web`, `rqworker QUEUE...` (django-rq's command),
`collector`, `reconcile`, and `stop-runs` (the chart's preStop hook).
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mlbench_master")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    up = sub.add_parser("up", help="start the embedded master (Ctrl-C stops it)")
    up.add_argument("--detach", action="store_true", help="run in the background")
    up.add_argument("--port", type=int, help="web server port (default 8000, or a free one)")
    up.add_argument(
        "--host",
        help="address the web server listens on (default 127.0.0.1; 0.0.0.0 or this host's "
        "address when workers on other hosts post to it, e.g. a Slurm cluster's nodes)",
    )
    up.add_argument("--quiet", action="store_true", help=argparse.SUPPRESS)
    up.add_argument(
        "--cluster",
        choices=("local", "kubernetes", "slurm"),
        help="the cluster driver (default: MLBENCH_CLUSTER, else local); slurm drives the "
        "cluster SLURM_CONF names",
    )
    sub.add_parser("down", help="stop the embedded master and everything it started")
    sub.add_parser("status", help="whether the embedded master runs, and where")
    web = sub.add_parser("web", help="the WSGI server (waitress) on 127.0.0.1")
    web.add_argument("--port", type=int, default=8000)
    web.add_argument("--host", default="127.0.0.1", help="address to listen on (a pod: 0.0.0.0)")
    web.add_argument("--threads", type=int, default=8)
    worker = sub.add_parser("rqworker", help="an RQ worker (django-rq) for the given queues")
    worker.add_argument("queues", nargs="+")
    collect = sub.add_parser("collector", help="record pod metrics every few seconds")
    collect.add_argument("--interval", type=float, default=5.0)
    sub.add_parser("reconcile", help="settle runs left active by a previous master")
    sub.add_parser(
        "stop-runs",
        help="stop the runs in progress and everything launched for them (a master pod's "
        "preStop hook)",
    )
    args = parser.parse_args(argv)

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mlbench_master.settings")
    # Here, after DJANGO_SETTINGS_MODULE is set: the modules below read it as they load.
    from mlbench_master import processes
    from mlbench_master.embedded import launcher, supervisor
    from mlbench_master.embedded.procs import LISTEN_HOST_ENV

    if args.command in ("up", "down", "status"):
        if args.command == "down":
            return launcher.down()
        if args.command == "status":
            return launcher.status()
        if args.cluster:  # the detached child inherits it
            os.environ["MLBENCH_CLUSTER"] = args.cluster
        if args.host:  # likewise
            os.environ[LISTEN_HOST_ENV] = args.host
        if args.port is not None and not 0 < args.port < 65536:
            parser.error("--port must be between 1 and 65535")
        if args.quiet:  # the detached child: the parent announces
            return supervisor.Supervisor(args.port).run(announce=False)
        return launcher.up(args.port, args.detach)

    if args.command == "web":
        processes.serve_web(args.port, args.threads, host=args.host)
    elif args.command == "rqworker":
        processes.rq_worker(args.queues)
    elif args.command == "collector":
        processes.collector(args.interval)
    elif args.command == "reconcile":
        processes.reconcile()
    elif args.command == "stop-runs":
        return processes.stop_runs()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # `python -m mlbench_master status | head`
        os._exit(0)
