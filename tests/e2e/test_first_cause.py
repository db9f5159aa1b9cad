"""The first cause of a failed run, with real mpirun ranks under the embedded master.

A run's FAILED reason names the first thing that went wrong, not the last process to
complain (mlbench_master/cluster/failures.py): here the race is made deterministic (a peer
aborts the moment rank 1 is killed, and mpirun reports the peer), and a rank is ended by the
kernel's OOM killer in a small memory cgroup, which the reason must say from the kernel's
own record. The killed-rank test with real training stays in test_faults.py.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.live import script, wait_until


def test_the_first_failure_is_named_when_a_peer_aborts_first(master):
    """Rank 1 is killed and rank 0 aborts at once, reaching mpirun first (mpirun's own
    report names rank 0): the reason names rank 1 and its signal, rank 0 after "then:"."""
    run = master.create_run(
        name="peer-aborts-first",
        custom_image_command=script("killed_then_abort.py"),
        run_all_nodes=True,
    )
    done = master.wait_state(run["id"], ("FINISHED", "FAILED", "CANCELLED"), timeout=60)
    assert done["state"] == "FAILED"
    causes = done["reason"].split("; last lines of stderr:")[0]
    first, _, rest = causes.partition("; then: ")
    assert first == "rank 1 exited with code 137 (killed: out of memory?)", done["reason"]
    assert rest.startswith("rank 0 "), done["reason"]


@pytest.fixture
def memory_cgroup() -> Iterator[Path]:
    """A memory cgroup (v1) of 64 MiB, swap included where the kernel counts it; removed
    after the test. Needs root and a writable memory hierarchy."""
    line = next(
        (x for x in Path("/proc/self/cgroup").read_text().splitlines() if ":memory:" in x), ""
    )
    parent = Path("/sys/fs/cgroup/memory") / line.partition(":memory:")[2].lstrip("/")
    group = parent / f"mlbench-oom-{os.getpid()}"
    try:
        group.mkdir()
    except OSError as exc:
        reason = f"cannot make a memory cgroup under {parent}: {exc}"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(reason)
        pytest.skip(reason)
    limit = str(64 * 1024 * 1024)
    (group / "memory.limit_in_bytes").write_text(limit)
    with contextlib.suppress(OSError):  # only where swap accounting is on
        (group / "memory.memsw.limit_in_bytes").write_text(limit)
    try:
        yield group
    finally:
        for _ in range(50):  # its last process may still be exiting
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def test_a_rank_the_oom_killer_ended_is_named_so(master, memory_cgroup):
    """The kernel's own record, not a guess: the reason says the OOM killer ended rank 1."""
    run = master.create_run(
        name="out-of-memory",
        custom_image_command=script("out_of_memory.py"),
        run_all_nodes=True,
    )
    wait_until(lambda: 1 in master.ranks(run["id"]), 60, "rank 1 did not start")
    (memory_cgroup / "cgroup.procs").write_text(str(master.ranks(run["id"])[1].pid))
    done = master.wait_state(run["id"], ("FINISHED", "FAILED", "CANCELLED"), timeout=60)
    assert done["state"] == "FAILED"
    assert done["reason"].startswith(
        "rank 1 exited with code 137 (killed by the kernel's OOM killer)"
    ), done["reason"]
