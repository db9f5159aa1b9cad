"""The local Slurm and a master driving it, for tests/slurm: started for real, asked with
Slurm's own tools, the processes of a job found by the SLURM_JOB_ID they carry, and the
master's Workers page opened in Chromium.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from tests.e2e.live import ROOT, LiveMaster, wait_until
from tests.services import free_port

SCRIPT = ROOT / "scripts" / "slurm" / "local-cluster.sh"
# Open MPI across two slurmd of one host: TCP on loopback (its shared-memory transport
# crashes there; docs/installation.rst says so too).
SETUP = (
    "export OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo "
    "OMPI_MCA_oob_tcp_if_include=lo OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
)


@dataclass
class SlurmCluster:
    directory: Path
    conf: str
    munged_pid: int = 0

    @classmethod
    def up(cls, directory: Path) -> SlurmCluster:
        done = subprocess.run(
            ["bash", str(SCRIPT), "up", str(directory)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            subprocess.run(["bash", str(SCRIPT), "down", str(directory)], check=False, timeout=120)
            raise RuntimeError(f"local Slurm did not start: {done.stdout}{done.stderr}")
        conf = done.stdout.strip().splitlines()[-1].split("=", 1)[1]
        return cls(directory, conf, int((directory / "munge" / "munged.pid").read_text()))

    def down(self) -> None:
        subprocess.run(
            ["bash", str(SCRIPT), "down", str(self.directory)],
            capture_output=True,
            timeout=120,
            check=False,
        )

    def leftovers(self) -> list[str]:
        """What of this cluster still lives: munged (by the pid it had at start) and every
        process whose environment names this cluster's slurm.conf (the daemons, their
        slurmstepd and every job process inherit it)."""
        found = []
        with contextlib.suppress(psutil.NoSuchProcess):
            munged = psutil.Process(self.munged_pid)
            if munged.status() != psutil.STATUS_ZOMBIE:
                found.append(f"munged (pid {self.munged_pid})")
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if proc.environ().get("SLURM_CONF") == self.conf:
                    if proc.status() != psutil.STATUS_ZOMBIE:
                        found.append(f"{proc.name()} (pid {proc.pid}): {proc.cmdline()}")
        return found

    def tool(self, *argv: str) -> str:
        env = {**os.environ, "SLURM_CONF": self.conf}
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=30)
        assert done.returncode == 0, f"{argv}: {done.stderr}"
        return done.stdout

    def jobs(self) -> list[dict[str, Any]]:
        return json.loads(self.tool("squeue", "--json", "--states=all"))["jobs"]

    def job(self, job_id: str) -> dict[str, Any]:
        """Slurm's record of job `job_id` (squeue keeps an ended job for MinJobAge)."""
        return next(j for j in self.jobs() if str(j["job_id"]) == str(job_id))

    def active_jobs(self) -> list[dict[str, Any]]:
        ended = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}
        return [j for j in self.jobs() if j["job_state"] not in ended]

    def cancel_all(self) -> None:
        ids = [str(j["job_id"]) for j in self.active_jobs()]
        if ids:
            self.tool("scancel", *ids)
            wait_until(lambda: not self.active_jobs(), 30, f"jobs {ids} did not end")


def slurm_env(cluster: SlurmCluster) -> dict[str, str]:
    """The master's settings for the local cluster. No MLBENCH_CLUSTER: SlurmMaster picks
    the driver with `mlbench up --cluster slurm`, as a user on a login node does."""
    return {
        "SLURM_CONF": cluster.conf,
        "MLBENCH_SLURM_SETUP": SETUP,
        "MLBENCH_MAX_CPUS": "8",  # beyond the nodes' 2: the driver's own check answers
    }


@dataclass
class SlurmMaster(LiveMaster):
    """A master started the way docs/installation.rst tells a Slurm user to:
    `mlbench up --detach --cluster slurm` (which runs `python -m mlbench_master up
    --cluster slurm`), with no MLBENCH_CLUSTER in its environment."""

    def up(self) -> str:  # type: ignore[override]
        """Start it (again); what `mlbench up` printed."""
        done = self.cli("up", "--detach", "--port", str(self.port), "--cluster", "slurm")
        if done.returncode != 0:
            logs = ""
            for log in sorted((self.home / "logs").glob("*.log")):
                logs += f"\n== {log.name}\n" + log.read_text(errors="replace")[-3000:]
            raise RuntimeError(
                f"mlbench up --cluster slurm failed: {done.stdout}{done.stderr}{logs}"
            )
        self.token = (self.home / "token").read_text().strip()
        return done.stdout


def start_slurm_master(postgres_url: str, home: Path, extra: dict[str, str]) -> SlurmMaster:
    """A fresh database on the session's PostgreSQL and an embedded master driving Slurm."""
    import psycopg

    dbname = f"slurm_{secrets.token_hex(4)}"
    server, _ = postgres_url.rsplit("/", 1)
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{dbname}"')
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MLBENCH_", "DJANGO_", "SLURM_"))
        and k not in ("REDIS_URL", "DATABASE_URL")
    }
    env.update(
        MLBENCH_HOME=str(home),
        DATABASE_URL=f"{server}/{dbname}",
        MLBENCH_SECRET_KEY=secrets.token_urlsafe(32),
        PATH=str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", ""),
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        PYTHONPATH=str(ROOT),
        **extra,
    )
    port = free_port()
    master = SlurmMaster(f"http://127.0.0.1:{port}", "", home, env, env["DATABASE_URL"], port)
    master.up()
    return master


def job_of(master: LiveMaster, run_id: int, timeout: float = 60) -> str:
    """The Slurm job id the run's launch record holds, once it has one."""
    found: list[str] = []

    def recorded() -> bool:
        job = _recorded_job(master, run_id)
        if job:
            found.append(job)
        return bool(job)

    wait_until(recorded, timeout, f"run {run_id} recorded no Slurm job")
    return found[0]


def _recorded_job(master: LiveMaster, run_id: int) -> str | None:
    """The Slurm job id of the run's latest launch, as its record holds it now."""
    metadata = master.run(run_id).get("job_metadata") or {}
    job = (metadata.get("slurm") or {}).get("job_id")
    return str(job) if job else None


def job_that_ended(run: dict, first_job: str) -> str:
    """The Slurm job of an ended run's last launch. After Open MPI's transient launch
    failure the master launches once more, as a new job (runs/jobs.py, launch_attempt 2);
    that first job then ended FAILED and `job_of`, asked early, named it. Any other change
    of job is a defect, so it is refused here."""
    record = run["job_metadata"]
    last = str(record["slurm"]["job_id"])
    if last != first_job:
        assert record.get("launch_attempt") == 2, (first_job, record)
    return last


def job_processes(job_id: str) -> list[psutil.Process]:
    """Every live process of Slurm job `job_id` (its environment names the job)."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.environ().get("SLURM_JOB_ID") == str(job_id):
                if proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
    return found


def rank_processes(job_id: str, want: int = 2, timeout: float = 60) -> dict[int, psutil.Process]:
    """The job's rank processes by MPI rank, once `want` of them run."""
    found: dict[str, dict[int, psutil.Process]] = {}

    def started() -> bool:
        found["ranks"] = _ranks_of(job_id)
        return len(found["ranks"]) >= want

    wait_until(started, timeout, f"the ranks of Slurm job {job_id} did not start")
    return found["ranks"]


def running_job(
    master: LiveMaster, run_id: int, want: int = 2, timeout: float = 120
) -> tuple[str, dict[int, psutil.Process]]:
    """The run's Slurm job once `want` of its ranks run, and those ranks by MPI rank. The
    job is read from the run's record at every look: after Open MPI's transient launch
    failure the master launches a second job (job_that_ended), and its ranks are the ones
    that run, so a test holding the first job's id would wait for ranks that never come."""
    found: dict = {}

    def started() -> bool:
        job = _recorded_job(master, run_id)
        if not job:
            return False
        found["job"], found["ranks"] = job, _ranks_of(job)
        return len(found["ranks"]) >= want

    wait_until(started, timeout, f"run {run_id}: no Slurm job with {want} running ranks")
    return found["job"], found["ranks"]


def _ranks_of(job_id: str) -> dict[int, psutil.Process]:
    ranks: dict[int, psutil.Process] = {}
    for proc in job_processes(job_id):
        with contextlib.suppress(psutil.Error):
            env = proc.environ()
            if "OMPI_COMM_WORLD_RANK" in env and "python" in proc.name():
                ranks[int(env["OMPI_COMM_WORLD_RANK"])] = proc
    return ranks


def kill_master(master: LiveMaster) -> None:
    """What a crash does: the supervisor and every process it started die at once
    (SIGKILL). The ranks live on: they are Slurm's processes, not the master's."""
    state = master.state()
    victims = [state["pid"], *state["processes"].values()]
    for pid in list(victims):
        with contextlib.suppress(psutil.NoSuchProcess):
            victims += [c.pid for c in psutil.Process(pid).children(recursive=True)]
    procs = []
    for pid in victims:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc = psutil.Process(pid)
            proc.kill()
            procs.append(proc)
    psutil.wait_procs(procs, timeout=10)


def workers_page(browser: Any, master: LiveMaster) -> Any:
    """The master's Workers page in a new Chromium context, signed in with the one-time
    link `up` wrote (each start writes a fresh one), once its script has filled it. The
    page's console errors, failed requests and HTTP errors are collected in `page.watch`
    (tests/browser's Watch): the caller asserts there are none."""
    from tests.browser.conftest import Watch

    context = browser.new_context(base_url=master.url, viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(30000)
    page.watch = Watch()
    page.watch.attach(page)
    page.goto((master.home / "login_link").read_text().strip())
    assert page.url.rstrip("/") == master.url, f"the sign-in link did not sign in: {page.url}"
    page.wait_for_selector("body[data-loaded='1']", state="attached")
    return page
