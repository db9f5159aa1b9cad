"""Local worker slots as hosts: real namespaces, veth links, tc shaping and mpirun ranks.

These need root (CAP_NET_ADMIN and CAP_SYS_ADMIN): on a developer's machine without it they skip with
the reason; under CI (CI=true, where the suite runs as root) a missing capability fails.
"""

import ipaddress
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mlbench_master.cluster.base import RunSpec
from mlbench_master.cluster.local import LocalCluster, network, slots
from mlbench_master.cluster.mpirun import driver_argv, rank_environment
from tests.cluster.local_launch import launch, read_until_exit, run_to_exit

pytestmark = pytest.mark.mpi


@pytest.fixture
def home(tmp_path, monkeypatch):
    missing = network.missing_capability()
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"worker slot networks cannot be built under CI: {missing}")
        pytest.skip(f"worker slot networks need root: {missing}")
    monkeypatch.setenv("MLBENCH_HOME", str(tmp_path))
    monkeypatch.setenv("MLBENCH_LOCAL_WORKERS", "2")
    monkeypatch.setenv("MLBENCH_LOCAL_NETWORK", "auto")
    from django.conf import settings

    monkeypatch.setattr(settings, "MLBENCH_LOCAL_NETWORK", "auto", raising=False)
    monkeypatch.setattr(settings, "MLBENCH_HOME", tmp_path, raising=False)
    monkeypatch.setattr(settings, "MLBENCH_LOCAL_WORKERS", 2, raising=False)
    monkeypatch.setattr(settings, "MLBENCH_DATA_DIR", tmp_path / "data", raising=False)
    yield tmp_path
    slots.close_slots(tmp_path)


def left_behind(home: Path) -> list[str]:
    """Everything of this home's slots that still exists: namespaces, links (with their
    qdiscs), hosts files, relay processes."""
    tag = network.home_tag(home)
    namespaces, links = network.existing(tag)
    etc = [str(p) for p in network.NETNS_ETC.glob(f"mlb-{tag}-*")]
    relays = [str(p.pid) for p in slots._relays(home)]
    return namespaces + links + etc + relays


def in_slot(namespace: str, code: str, *args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        ["ip", "netns", "exec", namespace, sys.executable, "-c", textwrap.dedent(code), *args],
        stdout=subprocess.PIPE,
        text=True,
        **kwargs,
    )


SINK = """
import socket, sys
srv = socket.socket(); srv.bind(("0.0.0.0", int(sys.argv[1]))); srv.listen(1)
print("ready", flush=True)
conn, _ = srv.accept()
total = 0
while True:
    data = conn.recv(1 << 16)
    if not data or data == b"ping":
        if data == b"ping":
            conn.sendall(b"pong"); continue
        break
    total += len(data)
print(total, flush=True)
"""

SEND = """
import socket, sys, time
sock = socket.create_connection((sys.argv[1], int(sys.argv[2])))
payload = b"x" * int(sys.argv[3])
start = time.perf_counter()
sock.sendall(payload)
sock.shutdown(socket.SHUT_WR)
sock.recv(1)
print(time.perf_counter() - start, flush=True)
"""

PING = """
import socket, sys, time
sock = socket.create_connection((sys.argv[1], int(sys.argv[2])))
sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
times = []
for _ in range(5):
    start = time.perf_counter(); sock.sendall(b"ping"); sock.recv(4)
    times.append(time.perf_counter() - start)
print(min(times), flush=True)
"""


def transfer(layout: network.Layout, size: int) -> float:
    """Seconds to send `size` bytes from slot 0 to slot 1 over TCP (until the peer closed)."""
    sink = in_slot(layout.namespace(1), SINK, "5001")
    assert sink.stdout.readline().strip() == "ready"
    send = in_slot(layout.namespace(0), SEND, layout.address(1), "5001", str(size))
    seconds = float(send.communicate(timeout=60)[0])
    assert int(sink.communicate(timeout=10)[0]) == size
    return seconds


def round_trip(layout: network.Layout) -> float:
    sink = in_slot(layout.namespace(1), SINK, "5002")
    assert sink.stdout.readline().strip() == "ready"
    ping = in_slot(layout.namespace(0), PING, layout.address(1), "5002")
    seconds = float(ping.communicate(timeout=60)[0])
    sink.kill()
    sink.wait()
    return seconds


def test_a_shaped_link_carries_no_more_than_its_rate(home):
    layout = network.create(home, 2, 50, None)
    size = 4_000_000
    seconds = transfer(layout, size)
    # 4 MB at 50 Mbit/s need 0.64 s on the wire; tbf/htb bursts allow a little less.
    assert seconds >= 0.9 * size * 8 / 50e6, f"{size} bytes in {seconds:.3f} s beat 50 Mbit/s"
    # Each slot has its own address and name, and resolves the others' names.
    names = in_slot(
        layout.namespace(0),
        "import socket, sys; print(socket.gethostbyname(sys.argv[1]))",
        layout.namespace(1),
    )
    assert names.communicate(timeout=10)[0].strip() == layout.address(1)


def opened(home: Path, run: RunSpec) -> network.Layout:
    """`run`'s slots opened as the driver opens them (with the relay, and its delay line
    when the kernel has no netem); their layout."""
    slots.open_slots(home, run, "http://127.0.0.1:9")
    record = slots.read_record(home)
    subnet = ipaddress.ip_network(record["subnet"])
    return network.Layout(record["tag"], subnet, record["slots"], record["delay_line"])


def test_latency_adds_at_least_the_round_trip_asked_for(home):
    run = RunSpec(id=5, num_workers=2, max_bandwidth=1000, latency_ms=20)
    notes = slots.plan(run)
    # netem where the kernel has it, else the userspace delay line: applied either way
    assert notes["latency"] == {
        "requested_ms": 20, "applied": True, "by": network.latency_method(),
    }  # fmt: skip
    layout = opened(home, run)
    assert layout.delay_line is (network.netem_missing() is not None)
    # 20 ms each way on each slot's link: a round trip takes at least 40 ms (and not 5x it)
    assert 0.040 <= round_trip(layout) < 0.2
    slots.close_slots(home)
    assert round_trip(opened(home, RunSpec(id=6, num_workers=2, max_bandwidth=1000))) < 0.040


def test_a_delayed_link_still_carries_no_more_than_its_rate(home):
    layout = opened(home, RunSpec(id=7, num_workers=2, max_bandwidth=50, latency_ms=1))
    size = 4_000_000
    seconds = transfer(layout, size)
    assert seconds >= 0.9 * size * 8 / 50e6, f"{size} bytes in {seconds:.3f} s beat 50 Mbit/s"


ALLREDUCES = (
    "python -c 'import time; from mpi4py import MPI; import numpy as np; c = MPI.COMM_WORLD; "
    "a = np.ones(4, dtype=np.float32); c.Allreduce(MPI.IN_PLACE, a); t = time.perf_counter(); "
    "[c.Allreduce(MPI.IN_PLACE, a) for _ in range(10)]; "
    'print("took", time.perf_counter() - t, a[0], flush=True)\''
)


def test_mpi_ranks_talk_across_a_delayed_link(home):
    """MPI's TCP traffic crosses the latency: 10 all-reduces of 2 ranks each wait at least
    one way (5 ms), so they take at least 50 ms; the values are summed right."""
    run = RunSpec(
        id=8, num_workers=2, max_bandwidth=1000, latency_ms=5,
        custom_image_command=ALLREDUCES, run_all_nodes=True,
    )  # fmt: skip
    code, lines = read_until_exit(launch(LocalCluster(), run))
    assert code == 0, [line.text for line in lines]
    took = [line.text.split() for line in lines if line.text.startswith("took")]
    assert len(took) == 2 and all(float(words[2]) == 2**11 for words in took), took
    assert all(float(words[1]) >= 0.050 for words in took), took


SLEEPER = (
    "python -c 'import os, socket, sys, time; "
    'print("slot", os.environ["OMPI_COMM_WORLD_RANK"], socket.gethostname(), flush=True); '
    "time.sleep(float(sys.argv[1])); sys.exit(int(sys.argv[2]))'"
)


def custom(run_id: int, seconds: float, code: int = 0) -> RunSpec:
    return RunSpec(
        id=run_id,
        num_workers=2,
        max_bandwidth=100,
        custom_image_command=f"{SLEEPER} {seconds} {code}",
        run_all_nodes=True,
    )


@pytest.mark.parametrize("code", [0, 3])
def test_finished_or_failed_launches_leave_nothing_behind(home, code):
    driver = LocalCluster()
    run = custom(21, 0.2, code)
    execution = launch(driver, run)
    assert execution.record["network"]["slots"], execution.record
    assert left_behind(home)
    exit_code, lines = read_until_exit(execution)
    assert exit_code == code
    hosts = {line.text for line in lines if line.text.startswith("slot")}
    tag = network.home_tag(home)
    assert hosts == {f"slot 0 mlb-{tag}-0", f"slot 1 mlb-{tag}-1"}
    execution.kill()  # what the job does at every end
    assert left_behind(home) == []


def test_a_cancelled_run_leaves_nothing_behind(home):
    driver = LocalCluster()
    run = custom(22, 120)
    execution = launch(driver, run)
    deadline = time.monotonic() + 30
    while len([p for p in driver.pods() if p.phase == "Running"]) < 2:
        assert time.monotonic() < deadline, "ranks did not start"
        time.sleep(0.1)
    # As the API does: a fresh driver object, the run as stored.
    LocalCluster().cancel(RunSpec(id=22, launch=dict(execution.record)))
    assert left_behind(home) == []
    assert read_until_exit(execution, 15)[0] != 0


def test_a_restarted_master_keeps_an_active_runs_slots_and_removes_the_rest(home):
    driver = LocalCluster()
    run = custom(23, 0)
    driver.prepare(run)  # ...and then the master died before anything else happened
    # Run 23 is still active (its job will re-attach): nothing is removed.
    assert LocalCluster().release_leftovers({"23"}) == []
    assert left_behind(home)
    # It is not active any more (or never was): everything goes.
    removed = LocalCluster().release_leftovers(set())
    assert f"mlb-{network.home_tag(home)}-0" in removed
    assert left_behind(home) == []


def test_the_reference_worker_trains_across_slots_with_gloo(home):
    """gloo's rendezvous needs rank 0's address as the other slots reach it."""
    driver = LocalCluster()
    run = RunSpec(
        id=24, num_workers=2, max_bandwidth=1000, backend="gloo", dataset="synthetic",
        max_epochs=1, time_budget=600,
    )  # fmt: skip
    argv = driver_argv(driver, run, driver.prepare(run))
    argv += ["--train-images", "256", "--test-images", "128", "--batch-size", "64"]
    executions = []

    def start():
        executions.append(driver.launch(run, argv, rank_environment(run, "", "tok")))
        return executions[-1]

    code, lines = run_to_exit(start, timeout=240)
    text = "\n".join(line.text for line in lines)
    assert code == 0, text[-3000:]
    assert "gloo (2 ranks)" in text or "backend gloo" in text
    for execution in executions:
        execution.kill()
    assert left_behind(home) == []


@pytest.mark.parametrize("drop", ["-all", "-sys_admin"])
def test_without_the_capability_runs_share_the_machines_network(tmp_path, drop):
    """Without CAP_NET_ADMIN and CAP_SYS_ADMIN (really dropped from root's bounding set by
    setpriv; CAP_NET_ADMIN alone, as `docker run --cap-add NET_ADMIN` gives, cannot make a
    namespace) the slots cannot be made: "auto" says why and runs as before; "namespaces"
    refuses the run with the fix."""
    code = textwrap.dedent(
        """
        from mlbench_master.cluster.base import ClusterError, RunSpec
        from mlbench_master.cluster.local import slots
        run = RunSpec(id=1, num_workers=2, max_bandwidth=10)
        print(slots.plan(run)["max_bandwidth"]["why"])
        import os; os.environ["MLBENCH_LOCAL_NETWORK"] = "namespaces"
        try:
            slots.plan(run)
        except ClusterError as exc:
            print("refused:", exc)
        """
    )
    argv = ["setpriv", f"--bounding-set={drop}", "--inh-caps=-all", sys.executable, "-c", code]
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "MLBENCH_LOCAL_NETWORK"}
    env["MLBENCH_LOCAL_NETWORK"] = "auto"
    env["PYTHONPATH"] = str(root)
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd="/", timeout=60)
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.strip().splitlines()
    assert "without root (CAP_NET_ADMIN and CAP_SYS_ADMIN)" in first
    assert second.startswith("refused: MLBENCH_LOCAL_NETWORK=namespaces but")


def test_off_means_no_slots(home, monkeypatch):
    monkeypatch.setenv("MLBENCH_LOCAL_NETWORK", "off")
    from django.conf import settings

    monkeypatch.setattr(settings, "MLBENCH_LOCAL_NETWORK", "off", raising=False)
    run = custom(25, 0)
    assert LocalCluster().prepare(run) == []
    assert slots.plan(run)["max_bandwidth"]["why"].startswith("MLBENCH_LOCAL_NETWORK=off")
    assert left_behind(home) == []


def test_a_free_port_inside_a_slot_is_not_the_machines(home):
    """The relay listens on the master's loopback port inside each slot only."""
    layout = network.create(home, 1, None, None)
    with socket.socket() as outside:
        outside.bind(("127.0.0.1", 0))
        port = outside.getsockname()[1]
        probe = in_slot(
            layout.namespace(0),
            "import socket, sys; s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); "
            "print('bound')",
            str(port),
        )
        assert probe.communicate(timeout=10)[0].strip() == "bound"


def test_slots_being_built_are_left_alone_by_other_runs(home):
    """The record names the run before anything is built: a late cancel of the run before
    it, or a reconcile round while the run is active, must not remove its slots."""
    slots.open_slots(home, RunSpec(id=11, num_workers=2, max_bandwidth=100), "http://127.0.0.1:9")
    slots._write_record(home, {"run_id": "12", "building": True})  # run 12 claims them now
    assert slots.launch_agent(home) is None  # not usable until built
    assert slots.close_slots(home, run_id=11) == []
    assert slots.release_leftovers(home, {"12"}) == []
    assert network.existing(network.home_tag(home))[0], "run 12's slots were removed"
    assert slots.release_leftovers(home, set())  # no active run owns them: removed
    assert left_behind(home) == []


def test_a_relay_that_cannot_start_says_why(tmp_path):
    """Its readiness comes on a pipe, not in a file: on a full disk the file and the log that
    would name the error stay empty (the chaos series' disk-full fault got a run failed
    with "the worker slots' relay did not start: " and nothing after). No root needed: the
    namespace does not exist, so the relay fails on its first socket, and its log is
    /dev/full, which takes no line."""
    from urllib.parse import urlsplit

    from mlbench_master.cluster.base import ClusterError

    run = RunSpec(id=3, num_workers=2, max_bandwidth=100)
    slots._folder(tmp_path).mkdir(parents=True)
    (slots._folder(tmp_path) / "relay.log").symlink_to("/dev/full")  # every write: ENOSPC
    with pytest.raises(ClusterError) as failed:
        slots._start_relay(
            tmp_path, run, ["mlb-no-such-slot"], urlsplit("http://127.0.0.1:9"), None, []
        )  # fmt: skip
    reason = str(failed.value)
    assert reason.startswith("the worker slots' relay did not start: ")
    assert "mlb-no-such-slot" in reason or "No such file" in reason, reason
    assert slots._relays(tmp_path) == []
