"""The local cluster: worker ranks as processes on this machine, started by one mpirun.

Why it is shaped like this:

- mpirun runs under a tiny `sh` wrapper in a session of its own, with its output written to
  files (not pipes) and its exit code written to a file when it ends. A run therefore
  survives a restart of the master (the RQ worker that launched it can die without killing
  the ranks), and the next master can re-attach: keep reading the files from where the last
  reader stopped and learn the exit code afterwards.
- Open MPI puts each rank in a process group of its own, so killing mpirun's process group
  is not enough. Every process of a launch carries marker variables in its environment
  (`MLBENCH_LOCAL_CLUSTER`, `MLBENCH_RUN_ID`, `MLBENCH_LAUNCH_ID`) and stays in the wrapper's
  session; `cancel` kills by the markers, from any process, so no rank is ever left behind
  (the session id only helps while its leader is verifiably our wrapper: pids get reused).
- The slots (`local-worker-0` ...) are reported busy from the rank processes that exist,
  not from bookkeeping that could drift.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

from mlbench_master.cluster.base import (
    ClusterDriver,
    ClusterError,
    Execution,
    OutputLine,
    PodInfo,
    PodSample,
    RunSpec,
)
from mlbench_master.cluster.mpirun import parse_line

# Environment markers carried by every process of a local launch.
CLUSTER_MARK = "MLBENCH_LOCAL_CLUSTER"
LAUNCH_MARK = "MLBENCH_LAUNCH_ID"
RUN_MARK = "MLBENCH_RUN_ID"
RANK_VAR = "OMPI_COMM_WORLD_RANK"
POD_PREFIX = "local-worker-"

# Runs `mpirun ...` ("$@"), then records its exit code atomically next to its output.
_WRAPPER = '"$@"; code=$?; echo "$code" > "$0.tmp" && mv "$0.tmp" "$0"; exit "$code"'


def _setting(name: str, default: Any = None) -> Any:
    """A Django setting when Django is configured, else the environment variable."""
    try:
        from django.conf import settings

        if settings.configured and hasattr(settings, name):
            return getattr(settings, name)
    except ImportError:  # pragma: no cover - the master always has Django
        pass
    return os.environ.get(name, default)


def mlbench_home() -> Path:
    home = _setting("MLBENCH_HOME") or Path.home() / ".mlbench"
    return Path(home).expanduser()


def local_slots() -> int:
    """MLBENCH_LOCAL_WORKERS, or the number of cores of this machine."""
    value = _setting("MLBENCH_LOCAL_WORKERS")
    if value in (None, ""):
        return os.cpu_count() or 1
    try:
        slots = int(value)
    except (TypeError, ValueError) as exc:
        raise ClusterError(
            f"MLBENCH_LOCAL_WORKERS={value!r} is not a whole number of worker slots"
        ) from exc
    if slots < 1:
        raise ClusterError(f"MLBENCH_LOCAL_WORKERS={value!r} must be at least 1")
    return slots


def venv_bin() -> Path:
    """The directory of this interpreter: where the virtualenv's mpirun lives."""
    return Path(sys.executable).parent


def find_mpirun() -> str:
    candidate = venv_bin() / "mpirun"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("mpirun")
    if found:
        return found
    raise ClusterError(
        "mpirun not found next to the Python interpreter or on PATH: "
        "install the worker extra (pip install 'mlbench[worker]') which brings Open MPI"
    )


# --------------------------------------------------------------------------- processes


def _environ(proc: psutil.Process) -> dict[str, str]:
    try:
        return proc.environ()
    except (psutil.Error, OSError):
        return {}


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _leader_is(sid: int | None, created: float | None) -> bool:
    """Whether process `sid` is still the session leader our launch recorded (same start)."""
    if not sid or created is None:
        return False
    try:
        return abs(psutil.Process(sid).create_time() - float(created)) < 1.0
    except (psutil.Error, TypeError, ValueError):
        return False


def launch_processes(
    home: Path,
    run_id: int | str | None = None,
    sid: int | None = None,
    sid_created: float | None = None,
) -> list[psutil.Process]:
    """Live processes of local launches under `home` (optionally of one run).

    A process counts only when it carries our marker (`MLBENCH_LOCAL_CLUSTER` = `home`, and
    the run's id when one is given): a session id alone is never trusted, since a pid (and
    with it a session id) may be reused by an unrelated program once our launch is gone.
    Members of session `sid` whose environment cannot be read are added only while the
    session leader is verifiably our wrapper (its create time is `sid_created`).
    """
    home_str = str(home)
    session_ours = _leader_is(sid, sid_created)
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        env = _environ(proc)
        if env:
            if env.get(CLUSTER_MARK) != home_str:
                continue
            if run_id is not None and env.get(RUN_MARK) != str(run_id):
                continue
        elif not (session_ours and _session_of(proc.pid) == sid):
            continue
        if _alive(proc):
            found.append(proc)
    return found


def _session_of(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def rank_processes(home: Path) -> dict[tuple[str, int], list[psutil.Process]]:
    """Processes of local ranks under `home`, keyed by (run id, rank)."""
    ranks: dict[tuple[str, int], list[psutil.Process]] = {}
    for proc in launch_processes(home):
        env = _environ(proc)
        if RANK_VAR not in env:
            continue
        try:
            rank = int(env[RANK_VAR])
        except ValueError:
            continue
        ranks.setdefault((env.get(RUN_MARK, ""), rank), []).append(proc)
    return ranks


def kill_processes(find: Any, grace: float = 3.0) -> None:
    """SIGTERM what `find()` returns, SIGKILL what is left after `grace`; repeat until none.

    `find` is called again after each round, so a rank that mpirun was starting at the
    moment of the kill is caught too.
    """
    for attempt in range(5):
        procs = find()
        if not procs:
            return
        sig = signal.SIGTERM if attempt == 0 else signal.SIGKILL
        for proc in procs:
            try:
                proc.send_signal(sig)
            except psutil.Error:
                pass
        alive = _wait_gone(procs, grace if attempt == 0 else 2.0)
        for proc in alive:
            try:
                proc.kill()
            except psutil.Error:
                pass
        _wait_gone(alive, 2.0)
    leftover = [p for p in find() if _alive(p)]
    if leftover:
        raise ClusterError(
            "could not stop local processes: " + ", ".join(str(p.pid) for p in leftover)
        )


def _wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait until `procs` are dead or zombies; return those still running.

    Deliberately not psutil.wait_procs: that reaps our own children, and the exit status
    of the mpirun wrapper must stay for its Popen to read.
    """
    deadline = time.monotonic() + timeout
    alive = [p for p in procs if _alive(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if _alive(p)]
    return alive


# --------------------------------------------------------------------------- execution


class LocalExecution(Execution):
    """A launched (or re-attached) mpirun whose output is tailed from files."""

    def __init__(self, info: dict[str, Any], popen: Any = None) -> None:
        self.info = info
        self.dir = Path(info["dir"])
        self.popen = popen
        self._offsets = self._load_offsets()
        self._handed = dict(self._offsets)  # bytes up to the last complete line handed out
        self._partial = {"stdout": b"", "stderr": b""}
        self._exited_code: int | None = None
        # True when mpirun ended unwatched and its wrapper recorded no exit code (killed).
        self.exit_unknown = False

    # offsets survive the reader so a re-attached master does not store lines twice
    def _load_offsets(self) -> dict[str, int]:
        try:
            data = json.loads((self.dir / "offsets.json").read_text())
            return {"stdout": int(data["stdout"]), "stderr": int(data["stderr"])}
        except (OSError, ValueError, KeyError):
            return {"stdout": 0, "stderr": 0}

    def checkpoint(self) -> None:
        """Record that every line handed out so far is stored (the job calls it after a
        successful write), so a re-attached reader starts after them and misses none."""
        tmp = self.dir / "offsets.json.tmp"
        tmp.write_text(json.dumps(self._handed))
        tmp.replace(self.dir / "offsets.json")

    def _exited(self) -> bool:
        if self._exited_code is not None:
            return True
        if self.popen is not None:
            code = self.popen.poll()
            if code is None:
                return False
            # Killed by a signal: report it the way a shell does (128 + signal number).
            self._exited_code = 128 - code if code < 0 else code
            return True
        try:
            proc = psutil.Process(self.info["pid"])
            same = abs(proc.create_time() - self.info["create_time"]) < 1.0
            if same and _alive(proc):
                return False
        except psutil.Error:
            pass
        recorded = self._recorded_code()
        self.exit_unknown = recorded is None
        self._exited_code = 128 + signal.SIGKILL if recorded is None else recorded
        return True

    def _recorded_code(self) -> int | None:
        """The exit code the wrapper wrote; None when it was killed before it could."""
        try:
            return int((self.dir / "exit_code").read_text().strip())
        except (OSError, ValueError):
            return None

    def _pending(self) -> bool:
        for stream in ("stdout", "stderr"):
            try:
                size = (self.dir / f"{stream}.log").stat().st_size
            except OSError:
                size = 0
            if size > self._offsets[stream] or self._partial[stream]:
                return True
        return False

    def _read_new(self, final: bool) -> list[OutputLine]:
        lines: list[OutputLine] = []
        for stream in ("stdout", "stderr"):
            path = self.dir / f"{stream}.log"
            try:
                with open(path, "rb") as fh:
                    fh.seek(self._offsets[stream])
                    data = fh.read(4 * 1024 * 1024)
            except OSError:
                data = b""
            self._offsets[stream] += len(data)
            buf = self._partial[stream] + data
            *complete, rest = buf.split(b"\n")
            if final and rest:
                complete.append(rest)
                rest = b""
            self._partial[stream] = rest
            self._handed[stream] = self._offsets[stream] - len(rest)
            for raw in complete:
                lines.append(parse_line(raw.decode("utf-8", "replace"), stream))
        return lines

    def read(self, timeout: float) -> list[OutputLine]:
        deadline = time.monotonic() + timeout
        while True:
            exited = self._exited()
            lines = self._read_new(final=exited)
            if lines or time.monotonic() >= deadline or (exited and not self._pending()):
                return lines
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))

    def poll(self) -> int | None:
        if not self._exited() or self._pending():
            return None
        return self._exited_code

    def kill(self) -> None:
        home = Path(self.info["home"])
        kill_processes(
            lambda: launch_processes(home, self.info.get("run_id"), *_session(self.info))
        )
        if self.popen is not None:
            try:
                self.popen.wait(timeout=5)
            except Exception:  # noqa: BLE001 - best effort reap of our own child
                pass


# --------------------------------------------------------------------------- driver


class LocalCluster(ClusterDriver):
    """`MLBENCH_CLUSTER=local`: MLBENCH_LOCAL_WORKERS slots on this machine."""

    name = "local"

    def __init__(self) -> None:
        self.home = mlbench_home()
        self.slots = local_slots()
        self.python = sys.executable
        self.hostname = socket.gethostname()

    @property
    def mpirun(self) -> str:
        return find_mpirun()

    def pods(self) -> list[PodInfo]:
        busy = {rank for (_run, rank) in rank_processes(self.home)}
        return [
            PodInfo(
                name=f"{POD_PREFIX}{i}",
                labels={"app": "mlbench", "component": "worker", "cluster": "local"},
                phase="Running" if i in busy else "Idle",
                ip="127.0.0.1",
                node=self.hostname,
            )
            for i in range(self.slots)
        ]

    def prepare(self, run: RunSpec) -> list[str]:
        if run.num_workers > self.slots:
            raise ClusterError(
                f"the run asks for {run.num_workers} workers but this machine has "
                f"{self.slots} local worker slots (set MLBENCH_LOCAL_WORKERS to change that)"
            )
        others = {r for (r, _rank) in rank_processes(self.home) if r != str(run.id)}
        if others:
            raise ClusterError(
                "the local worker slots are still busy with the ranks of run "
                + ", ".join(sorted(others))
                + ": delete that run (mlbench delete RUN) and try again"
            )
        find_mpirun()
        return []

    # -- launching
    def launch(self, run: RunSpec, argv: list[str], env: dict[str, str]) -> Execution:
        launch_id = uuid.uuid4().hex[:12]
        directory = self.home / "local-cluster" / f"run-{run.id}-{launch_id}"
        directory.mkdir(parents=True, exist_ok=True)
        full_env = dict(os.environ)
        full_env.update(env)
        full_env["PATH"] = f"{venv_bin()}{os.pathsep}{full_env.get('PATH', '')}"
        full_env.setdefault(
            "MLBENCH_DATA_DIR",
            str(_setting("MLBENCH_DATA_DIR") or self.home / "datasets"),
        )
        full_env[CLUSTER_MARK] = str(self.home)
        full_env[RUN_MARK] = str(run.id)
        full_env[LAUNCH_MARK] = launch_id
        # Django's settings module must not leak into the ranks' environment as a hint.
        full_env.pop("DJANGO_SETTINGS_MODULE", None)
        import subprocess

        with (
            open(directory / "stdout.log", "wb") as out,
            open(directory / "stderr.log", "wb") as err,
        ):
            popen = subprocess.Popen(
                ["/bin/sh", "-c", _WRAPPER, str(directory / "exit_code"), *argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=full_env,
                cwd=str(directory),
                start_new_session=True,
            )
        info = {
            "launch_id": launch_id,
            "pid": popen.pid,
            "sid": popen.pid,
            "create_time": psutil.Process(popen.pid).create_time(),
            "dir": str(directory),
            "home": str(self.home),
            "run_id": str(run.id),
            "argv": argv,
        }
        (directory / "launch.json").write_text(json.dumps(info))
        meta = _job_metadata(run)
        meta["local"] = info
        meta["max_bandwidth"] = {
            "requested_mbit_s": getattr(run, "max_bandwidth", None),
            "applied": False,
            "why": "the local cluster runs every rank on this machine and shapes no traffic",
        }
        return LocalExecution(info, popen=popen)

    def attach(self, run: RunSpec) -> Execution | None:
        """The launch of `run` recorded in its job_metadata, to keep reading it; or None."""
        info = _job_metadata(run).get("local")
        if not info or not Path(info.get("dir", "")).is_dir():
            return None
        return LocalExecution(info)

    def cancel(self, run: RunSpec) -> None:
        info = _job_metadata(run).get("local") or {}
        kill_processes(lambda: launch_processes(self.home, run.id, *_session(info)))

    def is_running(self, run: RunSpec) -> bool:
        info = _job_metadata(run).get("local") or {}
        return bool(launch_processes(self.home, run.id, *_session(info)))

    # -- resources
    def pod_metrics(self) -> list[PodSample]:
        now = dt.datetime.now(dt.UTC)
        wall = time.time()
        samples: list[PodSample] = []
        seen: set[tuple[int, float]] = set()
        for (run_id, rank), procs in sorted(rank_processes(self.home).items()):
            cpu = 0.0
            memory = 0
            net: tuple[int, int] | None = None
            for proc in procs:
                try:
                    key = (proc.pid, proc.create_time())
                    times = proc.cpu_times()
                    used = times.user + times.system
                    memory += proc.memory_info().rss
                except psutil.Error:
                    continue
                seen.add(key)
                previous = _CPU_SEEN.get(key)
                if previous is None:
                    span = max(wall - key[1], 1e-3)
                    cpu += used / span
                else:
                    span = max(wall - previous[0], 1e-3)
                    cpu += max(0.0, used - previous[1]) / span
                _CPU_SEEN[key] = (wall, used)
                if net is None:
                    net = _net_bytes(proc.pid)
            pod = f"{POD_PREFIX}{rank}"
            meta: dict[str, Any] = {"rank": rank}
            if run_id.isdigit():
                meta["run_id"] = int(run_id)
            samples.append(PodSample(pod, "cpu_cores", round(cpu, 4), now, False, dict(meta)))
            samples.append(PodSample(pod, "memory_bytes", float(memory), now, False, dict(meta)))
            if net is not None:
                # Ranks on one machine share its network namespace: these are host counters.
                net_meta = dict(meta, scope="host")
                samples.append(PodSample(pod, "net_rx_bytes", float(net[0]), now, True, net_meta))
                samples.append(
                    PodSample(pod, "net_tx_bytes", float(net[1]), now, True, dict(net_meta))
                )
        for key in list(_CPU_SEEN):
            if key not in seen:
                del _CPU_SEEN[key]
        return samples


# (pid, create_time) -> (wall time, cpu seconds) at the previous reading, for CPU rates.
_CPU_SEEN: dict[tuple[int, float], tuple[float, float]] = {}


def _net_bytes(pid: int) -> tuple[int, int] | None:
    """Received and sent bytes of the network namespace `pid` lives in (all interfaces)."""
    try:
        text = Path(f"/proc/{pid}/net/dev").read_text()
    except OSError:
        return None
    rx = tx = 0
    for line in text.splitlines()[2:]:
        if ":" not in line:
            continue
        fields = line.split(":", 1)[1].split()
        if len(fields) >= 9:
            rx += int(fields[0])
            tx += int(fields[8])
    return rx, tx


def _session(info: dict[str, Any]) -> tuple[int | None, float | None]:
    """The recorded session id of a launch and its leader's create time."""
    return info.get("sid"), info.get("create_time")


def _job_metadata(run: RunSpec) -> dict[str, Any]:
    meta = getattr(run, "job_metadata", None)
    if not isinstance(meta, dict):
        meta = {}
        try:
            run.job_metadata = meta  # type: ignore[attr-defined]
        except AttributeError:
            pass
    return meta
