"""A FAILED reason names the first failure, then the later ones (cluster/failures.py)."""

from mlbench_master.cluster.base import OutputLine
from mlbench_master.cluster.failures import SAME_MOMENT, THEN_MAX, OutputTail, failure_reason
from mlbench_master.cluster.local import kernel_log
from mlbench_master.cluster.mpirun import RANK_END

# Open MPI's report when rank 0 called MPI_Abort after its peer was killed.
ABORT_REPORT = [
    "prterun has exited due to process rank 0 with PID 0 on node vm calling",
    '"abort". This may have caused other processes in the application to be',
]


def ended(rank: int, code: int, at: str = "") -> OutputLine:
    return OutputLine(rank, "stderr", f"{RANK_END} code={code} pid={100 + rank} time={at}")


def tail_of(*lines: OutputLine) -> OutputTail:
    tail = OutputTail()
    tail.add(list(lines))
    return tail


def test_the_rank_that_ended_first_is_named_whatever_order_its_line_came_in():
    tail = tail_of(
        OutputLine(0, "stderr", "peer gone; aborting"),
        ended(0, 14, "1795696923.373868"),
        ended(1, 137, "1795696923.371618"),
        *[OutputLine(None, "stderr", text) for text in ABORT_REPORT],
    )
    assert tail.reason(14) == (
        "rank 1 exited with code 137 (killed: out of memory?); then: rank 0 exited with "
        "code 14; last lines of stderr:\n[rank 0] peer gone; aborting"
    )


def test_the_launchers_report_speaks_for_a_rank_whose_watcher_was_killed():
    tail = tail_of(
        ended(1, 137, "5.0"), *[OutputLine(None, "stderr", text) for text in ABORT_REPORT]
    )
    assert tail.reason(14).startswith(
        "rank 1 exited with code 137 (killed: out of memory?); then: rank 0 called MPI_Abort;"
    )


def test_without_watcher_lines_the_launchers_report_is_the_reason():
    assert failure_reason(14, ABORT_REPORT, []) == "rank 0 called MPI_Abort"


def test_ranks_that_ended_cleanly_are_not_failures():
    tail = tail_of(ended(0, 0, "1.0"), ended(1, 3, "2.0"))
    assert tail.reason(3) == "rank 1 exited with code 3"


def test_lines_without_a_time_keep_the_order_they_came_in_after_timed_ones():
    tail = tail_of(ended(2, 1), ended(0, 143), ended(1, 137, "9.0"))
    assert tail.reason(1) == (
        "rank 1 exited with code 137 (killed: out of memory?); then: rank 2 exited with "
        "code 1; then: rank 0 exited with code 143 (terminated)"
    )


def test_a_launcher_ended_by_a_signal_comes_before_the_ranks_it_took_along():
    tail = tail_of(ended(0, 143, "2.0"), ended(1, 143, "2.1"))
    assert tail.reason(137).startswith(
        "mpirun exited with code 137 (killed: out of memory?); then: rank 0 exited with code 143"
    )


def test_at_most_a_few_later_failures_are_named():
    ranks = THEN_MAX + 3
    tail = tail_of(*[ended(rank, 143, f"{rank}.0") for rank in range(ranks)])
    reason = tail.reason(1)  # mpirun's own code: its report names no rank here
    assert reason.startswith("rank 0 exited with code 143 (terminated); then: rank 1 ")
    assert reason.count("; then: ") == THEN_MAX
    assert reason.endswith("(and 2 more)")


def test_a_cause_the_cluster_saw_comes_first_then_the_ranks():
    tail = tail_of(ended(1, 137, "1.0"), OutputLine(1, "stderr", "oom"))
    assert tail.with_stderr("Slurm job 7 lost a node (NODE_FAIL)") == (
        "Slurm job 7 lost a node (NODE_FAIL); then: rank 1 exited with code 137 "
        "(killed: out of memory?); last lines of stderr:\n[rank 1] oom"
    )


def test_watcher_lines_and_bashs_job_report_are_not_quoted_as_stderr():
    tail = tail_of(
        OutputLine(1, "stderr", 'mlbench-rank: line 2:  9529 Killed                  "$@"'),
        ended(1, 137, "1.0"),
        OutputLine(1, "stderr", "real output"),
    )
    assert tail.last_stderr() == ["[rank 1] real output"]


def test_a_watcher_line_from_the_launcher_itself_is_not_a_rank_end():
    tail = tail_of(OutputLine(None, "stderr", f"{RANK_END} code=9 pid=1 time=1.0"))
    assert list(tail.ends) == []


# Two records the kernel wrote when its OOM killer ended a rank here (one in cgroup v1).
KERNEL_RECORDS = [
    "6,10401,11603677778,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,"
    "mems_allowed=0,oom_memcg=/mlbench-oom-1,task_memcg=/mlbench-oom-1,task=python,"
    "pid=19472,uid=0",
    "3,10402,11603677788,-;Memory cgroup out of memory: Killed process 19473 (python) "
    "total-vm:79564kB, anon-rss:70144kB, file-rss:6096kB, shmem-rss:0kB, UID:0",
    "6,10403,11603677790,-;eth0: renamed from mlb07c7c2t1 pid=5",
]


def test_the_kernels_record_names_the_pids_its_oom_killer_ended():
    assert kernel_log.oom_killed_pids(KERNEL_RECORDS) == {19472, 19473}


def test_an_unreadable_kernel_log_claims_nothing(tmp_path):
    assert kernel_log.kernel_records(str(tmp_path / "no-kmsg")) == []


def test_a_rank_the_kernel_says_it_killed_is_named_so():
    report = ["Process name: [prterun-vm-1606@1,1]", "Exit code:    137"]
    tail = tail_of(
        ended(0, 143, "2.0"),
        ended(1, 137, "1.0"),
        *[OutputLine(None, "stderr", text) for text in report],
    )
    assert tail.pids() == {100, 101}
    assert tail.reason(137, oom_killed={101}).startswith(
        "rank 1 exited with code 137 (killed by the kernel's OOM killer); then: rank 0"
    )


def test_a_killed_rank_comes_before_a_peers_abort_its_watcher_stamped_earlier():
    """On a loaded machine the killed rank's watcher may read the clock after its peer
    aborted and ended: within SAME_MOMENT the kill still comes first."""
    tail = tail_of(ended(0, 14, "10.000"), ended(1, 137, "10.004"), ended(2, 143, "9.999"))
    assert tail.reason(14).startswith(
        "rank 1 exited with code 137 (killed: out of memory?); then: rank 2 exited with code "
        "143 (terminated); then: rank 0 exited with code 14"
    )


def test_a_rank_slurm_said_it_cancelled_comes_after_the_failure_that_made_srun_stop_it():
    """srun (--kill-on-bad-exit) SIGKILLs the other ranks once one failed; the step daemon
    says so in their output first. Seen in CI: rank 0's watcher stamped its kill before rank
    1's exit, and the kill was named first."""
    cancelled = "slurmstepd-n1: error: *** STEP 3.0 ON n1 CANCELLED AT 2026-11-29T01:15:04 ***"
    tail = OutputTail("srun")
    tail.add([
        OutputLine(1, "stderr", "rank 1 fails on purpose"),
        OutputLine(0, "stderr", cancelled),
        ended(0, 137, "20.000"),
        ended(1, 3, "20.300"),
        OutputLine(None, "stderr", "srun: error: n1: task 0: Killed"),
        OutputLine(None, "stderr", "srun: error: n2: task 1: Exited with exit code 3"),
    ])  # fmt: skip
    assert tail.reason(137).startswith(
        "rank 1 exited with code 3; then: rank 0 exited with code 137"
    ), tail.reason(137)
    # A rank killed before any cancel is still a first cause, its peer's cancel after it.
    tail = OutputTail("srun")
    tail.add([ended(1, 137, "30.200"), OutputLine(0, "stderr", cancelled), ended(0, 137, "30.0")])
    assert tail.reason(1).startswith("rank 1 exited with code 137"), tail.reason(1)


def test_ends_far_apart_are_ordered_by_time_whatever_their_kind():
    tail = tail_of(ended(0, 1, "10.0"), ended(1, 137, f"{10.0 + SAME_MOMENT + 0.5}"))
    assert tail.reason(1).startswith("rank 0 exited with code 1; then: rank 1 exited with code 137")


def test_open_mpis_own_codes_are_not_read_as_signals():
    assert failure_reason(213, [], []) == "mpirun exited with code 213"


def test_ends_the_stream_lost_are_read_from_the_watchers_file():
    # The launcher tore the job down and closed the ranks' pipe: rank 1's line reached
    # only the file. The same end in both is counted once.
    tail = tail_of(ended(0, 14, "7.2"), *[OutputLine(None, "stderr", t) for t in ABORT_REPORT])
    recorded = f"1 {RANK_END} code=137 pid=101 time=7.1\n0 {RANK_END} code=14 pid=100 time=7.2\n"
    # A line without a rank is ignored; one cut short by a full disk (no newline) too, even
    # where what is left parses: its time, cut, would read as the earliest end.
    tail.add_recorded(recorded + "garbage without a rank\n" + f"2 {RANK_END} code=9 pid=9 time=7")
    assert len(tail.ends) == 2
    assert tail.reason(14).startswith(
        "rank 1 exited with code 137 (killed: out of memory?); then: rank 0 exited with code 14;"
    )


def test_the_watcher_writes_its_file_even_when_its_stderr_is_gone(tmp_path):
    import os
    import subprocess

    from mlbench_master.cluster.mpirun import RANK_ENDS_VARIABLE, RANK_WATCH

    ends = tmp_path / "rank-ends"
    ends.mkdir()
    read, write = os.pipe()
    os.close(read)  # a reader that has gone: writing to stderr now fails (EPIPE)
    env = {**os.environ, RANK_ENDS_VARIABLE: str(ends), "OMPI_COMM_WORLD_RANK": "1"}
    done = subprocess.run([*RANK_WATCH, "sh", "-c", "exit 3"], env=env, stderr=write, check=False)
    os.close(write)
    assert done.returncode in (3, -13)  # its own code, or SIGPIPE from the dead stderr
    (written,) = ends.iterdir()  # one file a rank: RANK.PID
    assert written.name.startswith("1.")
    tail = OutputTail()
    tail.add_recorded(written.read_text())
    assert [(end.rank, end.code) for end in tail.ends] == [(1, 3)]


def test_a_watcher_with_nowhere_to_record_says_nothing_of_it(tmp_path):
    import os
    import subprocess

    from mlbench_master.cluster.mpirun import RANK_ENDS_VARIABLE, RANK_WATCH

    for where in ("", str(tmp_path / "missing")):  # Kubernetes; a folder this node lacks
        env = {**os.environ, RANK_ENDS_VARIABLE: where}
        done = subprocess.run(
            [*RANK_WATCH, "sh", "-c", "exit 4"], env=env, capture_output=True, text=True
        )
        assert done.returncode == 4
        assert done.stderr.startswith(RANK_END) and done.stderr.count("\n") == 1
