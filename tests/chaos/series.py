"""One chaos series from start to verdict: a PostgreSQL of its own, a real embedded master
(local driver, or a local Slurm cluster), a queue of runs, faults at the seed's moments
while a poller keeps asking the API, then `mlbench down`, the evidence and the invariants.

Used by the short form in `make test` (tests/chaos/test_series.py) and the long form of
`make chaos` (`python -m tests.chaos`). Whatever happens, the machine is left clean: the
master is stopped, anything of it still alive afterwards is reported, then removed.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil
import psycopg
import requests

from mlbench_worker.shared.evaluation import test_sets
from tests.chaos import workload
from tests.chaos.evidence import FINAL, Evidence, Submitted, gather, install_history
from tests.chaos.faults import KINDS, Stage
from tests.chaos.invariants import check, final_write, hits
from tests.chaos.poller import Poller
from tests.chaos.schedule import FaultLog, inject_all, plan
from tests.chaos.summary import summarize
from tests.chaos.victims import Victims
from tests.e2e.live import LiveMaster, start_master
from tests.services import postgres_server

SMALL_DISK = "64m"  # the runs' output folder's own filesystem (the disk-full fault fills it)


@dataclass
class Settings:
    seed: int
    runs: int
    faults: int
    kinds: tuple[str, ...] = KINDS
    gap: tuple[float, float] = (4.0, 12.0)  # seconds between faults
    labels: tuple[str, ...] = ()  # the run kinds to draw from (workload.py); all if empty
    driver: str = "local"  # or "slurm"
    deadline: float = 3600.0  # seconds the runs may take in all


@dataclass
class Outcome:
    settings: Settings
    evidence: Evidence
    violations: dict[str, list[str]]
    summary: dict[str, Any]
    fault_log: Path
    notes: list[str] = field(default_factory=list)

    @property
    def held(self) -> bool:
        return not any(self.violations.values())

    def report(self) -> str:
        """The violations, the runs, then the fault log: everything a replay needs."""
        lines = [f"chaos series, seed {self.settings.seed} ({self.settings.driver} driver)"]
        for name, found in self.violations.items():
            lines += [f"VIOLATED {name}: {v}" for v in found]
        lines += [*self.notes, self.runs(), f"fault log ({self.fault_log}):"]
        return "\n".join(lines) + "\n" + self.fault_log.read_text()

    def runs(self) -> str:
        """One line per run: id, kind, end state, reason, the faults that hit it, and the
        grade of its final model where the master holds one."""
        lines = ["runs (id, kind, end state, reason, faults that hit it, model's grade):"]
        for run in self.evidence.submitted:
            final = final_write(self.evidence, run.run_id)
            state = final.new if final else self.evidence.unfinished.get(run.run_id, "?")
            reason = (final.reason if final else "")[:200].replace("\n", " | ")
            hit = [f"{f.n}:{f.kind}" for f in hits(self.evidence, run.run_id)]
            model = self.evidence.models.get(run.run_id, {}).get("status")
            graded = f" model {model!r}" if model else ""
            lines.append(f"  {run.run_id} {run.label!r} {state} {reason!r} {hit}{graded}")
        return "\n".join(lines)


@contextlib.contextmanager
def small_filesystem(folder: Path) -> Iterator[tuple[Path | None, str]]:
    """`folder` on a tmpfs of SMALL_DISK, so a fault can fill it; (None, why) where this
    process may not mount one."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        yield None, "mounting a small filesystem for the log folder needs root"
        return
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SMALL_DISK}", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        yield None, f"cannot mount a tmpfs on the log folder: {done.stderr.strip()}"
        return
    try:
        yield folder, ""
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True, check=False)


@contextlib.contextmanager
def slurm_cluster(workdir: Path) -> Iterator[Any]:
    """The repository's local Slurm cluster, private to this series."""
    from tests.slurm.live import SlurmCluster

    cluster = SlurmCluster.up(workdir / "slurm-cluster")
    try:
        yield cluster
    finally:
        with contextlib.suppress(Exception):
            cluster.cancel_all()
        cluster.down()


def missing_capabilities(settings: Settings, no_log_dir: str) -> dict[str, str]:
    """The planned fault kinds this machine cannot do, and why (their faults are skipped
    with the reason; under CI=true the series fails instead, as other tests that need a
    capability do)."""
    missing = {}
    if "disk-full" in settings.kinds and no_log_dir:
        missing["disk-full"] = no_log_dir
    if "link-drop" in settings.kinds and settings.driver == "local":
        from mlbench_master.cluster.local.network import missing_capability

        why = missing_capability()
        if why:
            missing["link-drop"] = f"the local driver makes no slot links here: {why}"
    return missing


def _start(settings: Settings, postgres: str, home: Path, cluster: Any) -> LiveMaster:
    if settings.driver == "slurm":
        from tests.slurm.live import slurm_env, start_slurm_master

        return start_slurm_master(postgres, home, slurm_env(cluster))
    return start_master(postgres, home)


def submit(master: LiveMaster, entries: list[workload.Entry], points: Path) -> list[Submitted]:
    """Queue every run (the master runs them one after another)."""
    points.mkdir(parents=True, exist_ok=True)
    submitted = []
    for entry in entries:
        body, points_file = entry.request(points)
        response = master.post("/api/runs/", body)
        assert response.status_code == 201, f"{entry.label}: {response.status_code} {response.text}"
        run = response.json()
        submitted.append(Submitted(run["id"], entry.label, points_file, run.get("task") or ""))
    return submitted


def unfinished(master: LiveMaster, submitted: list[Submitted]) -> dict[int, str] | None:
    """The runs not yet ended, with their state (deleted runs have ended); None when the
    database does not answer."""
    ids = [r.run_id for r in submitted]
    try:
        with psycopg.connect(master.database_url, connect_timeout=3) as conn:
            rows = conn.execute(
                "SELECT id, state FROM api_run WHERE id = ANY(%s) AND NOT state = ANY(%s)",
                [ids, list(FINAL)],
            ).fetchall()
    except psycopg.Error:
        return None
    return {int(r[0]): r[1] for r in rows}


def grading(master: LiveMaster, submitted: list[Submitted], settled: set[int]) -> bool:
    """Whether the master is still grading the final model of a run graded from its model
    (task 3; the grade runs after the model's POST, so it may outlast the run), as the API
    shows it (`evaluation.audit` "pending"; a grade whose master process ended reads "not
    audited" there). True while the API does not answer. The runs found settled are added
    to `settled` and not asked again."""
    for run in submitted:
        if run.run_id in settled or not test_sets.grades_the_model(run.task):
            continue
        try:
            response = master.get(f"/api/runs/{run.run_id}/")
        except requests.RequestException:
            return True
        if response.status_code == 404:  # deleted by the series' cancel
            settled.add(run.run_id)
            continue
        if response.status_code != 200:
            return True
        found = response.json()
        if found["state"] == "FINISHED" and found["evaluation"]["audit"]["status"] == "pending":
            return True
        settled.add(run.run_id)
    return False


def run_series(settings: Settings, workdir: Path) -> Outcome:
    """Run the series in `workdir` (its fault log, the runs' point files, the master's
    home) and judge it."""
    workdir.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    faults = plan(settings.seed, settings.faults, settings.kinds, settings.gap)
    log = FaultLog(workdir / "faults.jsonl", settings.seed, asdict(settings))
    home = workdir / "home"
    notes: list[str] = []
    with contextlib.ExitStack() as stack:
        postgres = stack.enter_context(postgres_server())
        cluster = (
            stack.enter_context(slurm_cluster(workdir)) if settings.driver == "slurm" else None
        )
        output = home / ("slurm" if cluster is not None else "local-cluster")
        log_dir, no_log_dir = stack.enter_context(small_filesystem(output))
        unable = missing_capabilities(settings, no_log_dir)
        for kind, why in unable.items():
            if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
                raise RuntimeError(f"{kind} faults cannot be done here: {why} (under CI they must)")
            notes.append(f"{kind} faults skipped: {why}")
        if cluster is not None:
            unable["link-drop"] = "the Slurm driver gives the master no links of its own"
        master = _start(settings, postgres, home, cluster)
        victims = Victims(master, cluster)
        stack.callback(_clean_up, victims, notes)
        install_history(master.database_url)
        stage = Stage(master, victims, postgres, log_dir, no_log_dir, master.up, unable)
        entries = workload.draw(settings.seed, settings.runs, settings.labels)
        with Poller(master) as poller:
            submitted = submit(master, entries, workdir / "points")

            settled: set[int] = set()

            def done() -> bool:  # every run ended, and every final model's grade
                return unfinished(master, submitted) == {} and not grading(
                    master, submitted, settled
                )

            injected = inject_all(faults, stage, log, done)
            deadline = began + settings.deadline
            while not done() and time.monotonic() < deadline:
                time.sleep(1.0)
            left = unfinished(master, submitted) or {}
        master.down()
        evidence = gather(
            master.database_url, submitted, injected, poller.polls, victims.leftovers(),
            home if cluster is None else None, left, master_home=home,
        )  # fmt: skip
        _keep_logs(evidence, workdir / "logs")
        violations = check(evidence)
        summary = summarize(settings, evidence, violations, time.monotonic() - began)
    return Outcome(settings, evidence, violations, summary, log.path, notes)


def _keep_logs(evidence: Evidence, folder: Path) -> None:
    """Each run's stored log beside the fault log (the database goes with the series)."""
    folder.mkdir(parents=True, exist_ok=True)
    for run_id, text in evidence.logs.items():
        (folder / f"run-{run_id}.log").write_text(text)


def _clean_up(victims: Victims, notes: list[str]) -> None:
    """Stop whatever of the master outlived `down` (already reported as a violation), so
    the machine is left as it was found."""
    with contextlib.suppress(Exception):
        victims.master.down()
    procs = victims.processes()
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(procs, timeout=10)
    if victims.slurm is None:
        from mlbench_master.cluster.local import network

        removed = network.remove(victims.home)
        if removed:
            notes.append(f"removed after the series: {', '.join(removed)}")
