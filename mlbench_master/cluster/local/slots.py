"""A run's worker slots as hosts: the network (network.py), the relay to the master
(relay.py), mpirun's launch agent, and the record that lets any master process remove them.

Lifecycle: `open_slots` in the driver's prepare; `close_slots` when the launch is killed or
ends (LocalExecution.kill, which the job calls at every end), on cancel, and
`release_leftovers` at master start and in the collector's reconcile rounds (a crash left
them behind). The record (MLBENCH_HOME/local-cluster/network.json) names the run that owns
the slots, so a restarted master keeps the network of a run it re-attaches to.

MLBENCH_LOCAL_NETWORK decides: "auto" (the default: namespaces when the master may create
them, else the machine's network with the limits recorded as not applied), "namespaces" (a
run fails with the reason when it cannot), "off" (every rank in the machine's own network:
loopback and shared memory, as on a single host).
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil

from mlbench_master.cluster.base import ClusterError, RunSpec
from mlbench_master.cluster.environment import setting
from mlbench_master.cluster.local import network
from mlbench_master.cluster.local.processes import CLUSTER_MARK, environ_of, kill_processes

MODES = ("auto", "namespaces", "off")
RELAY_MARK = "MLBENCH_SLOT_RELAY"  # carried by the relay process (value: the run id)
PROXY_PORT = 3128  # inside each slot: the relay's HTTP(S) proxy to the outside world
LOOPBACK = {"127.0.0.1", "localhost", "::1"}

# mpirun's launch agent (Open MPI's plm_rsh_agent): "$1" is the host mpirun wants to start
# its daemon on, i.e. the slot's namespace; the daemon (and the ranks it starts) run inside
# it with a host name of their own (a UTS namespace), the one /etc/hosts gives its address.
AGENT = """# mpirun's launch agent for mlbench's local worker slots (written by the master).
host="$1"; shift
case "$host" in
  mlb-{tag}-[0-9]*) ;;
  *) echo "mlbench slot agent: $host is not a worker slot of this master" >&2; exit 1;;
esac
exec ip netns exec "$host" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$host" "$*"
"""


def mode() -> str:
    value = (setting("MLBENCH_LOCAL_NETWORK") or "auto").strip().lower()
    if value not in MODES:
        raise ClusterError(f"MLBENCH_LOCAL_NETWORK={value!r} is not one of {', '.join(MODES)}")
    return value


def _folder(home: Path) -> Path:
    return Path(home) / "local-cluster"


def _record_path(home: Path) -> Path:
    return _folder(home) / "network.json"


def agent_path(home: Path) -> Path:
    return _folder(home) / "slot-agent.sh"


def why_not(run: RunSpec) -> str | None:
    """Why `run`'s ranks will share the machine's own network (None: each gets a slot host)."""
    chosen = mode()
    if chosen == "off":
        return "MLBENCH_LOCAL_NETWORK=off: every rank uses this machine's own network"
    missing = network.missing_capability()
    if missing:
        if chosen == "namespaces":
            raise ClusterError(
                f"MLBENCH_LOCAL_NETWORK=namespaces but {missing}: run the master as root "
                "(CAP_NET_ADMIN and CAP_SYS_ADMIN), or set MLBENCH_LOCAL_NETWORK=auto"
            )
        return f"{missing}, so worker slots cannot be hosts of their own"
    return None


def plan(run: RunSpec) -> dict[str, Any]:
    """What the network of `run` will be: the notes the manifest and the launch record keep."""
    why = why_not(run)
    bandwidth: dict[str, Any] = {"requested_mbit_s": run.max_bandwidth, "applied": why is None}
    latency: dict[str, Any] = {"requested_ms": run.latency_ms, "applied": False}
    if why:
        bandwidth["why"] = why
    if run.latency_ms:
        delay_missing = why or network.latency_support()
        latency["applied"] = delay_missing is None
        if delay_missing:
            latency["why"] = delay_missing
        else:
            latency["by"] = network.latency_method()
    return {"max_bandwidth": bandwidth, "latency": latency}


def launch_notes(home: Path, run: RunSpec) -> dict[str, Any]:
    """The plan of `run`'s network, and the slots `open_slots` made for it (the launch
    record's notes)."""
    notes = plan(run)
    record = read_record(home)
    if record and record.get("run_id") == str(run.id) and "addresses" in record:
        notes["network"] = {"subnet": record["subnet"], "slots": record["addresses"]}
    return notes


def open_slots(home: Path, run: RunSpec, master_url: str) -> list[str]:
    """Make `run`'s slots; the mpirun hosts. None when the run shares the machine's network
    (`plan` says why)."""
    notes = plan(run)
    if not notes["max_bandwidth"]["applied"]:
        return []
    delay = run.latency_ms if notes["latency"]["applied"] else None
    target = urlsplit(master_url)
    close_slots(home)  # a crash's left-overs, relay included
    # Claimed before anything is made: a reconcile round or a late cancel of another run,
    # in another process, then leaves these slots alone while they are being built.
    _write_record(home, {"run_id": str(run.id), "building": True})
    try:
        spared = _master_address(target)
        layout = network.create(home, run.num_workers, run.max_bandwidth, delay, spared)
        namespaces = [layout.namespace(i) for i in range(layout.slots)]
        record: dict[str, Any] = {
            "run_id": str(run.id),
            **layout.record(),
            "hosts": namespaces,
            "addresses": {ns: layout.address(i) for i, ns in enumerate(namespaces)},
        }
        agent_path(home).write_text(AGENT.replace("{tag}", layout.tag))
        delayed = [layout.address(i) for i in range(layout.slots)] if layout.delay_line else []
        record["relay"] = _start_relay(home, run, namespaces, target, delay, delayed)
        _write_record(home, record)
    except BaseException:
        close_slots(home)
        raise
    return namespaces


def _write_record(home: Path, record: dict[str, Any]) -> None:
    _folder(home).mkdir(parents=True, exist_ok=True)
    tmp = _record_path(home).with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    tmp.replace(_record_path(home))


def _master_address(target: Any) -> list[str]:
    """The master's address when the ranks reach it over the slots' links (not through the
    relay on their loopback): spared by the shaping, as on Kubernetes."""
    host = target.hostname or "127.0.0.1"
    if host in LOOPBACK:
        return []
    try:
        return [socket.gethostbyname(host)]
    except OSError:
        return []


def _start_relay(
    home: Path, run: RunSpec, namespaces: list[str], target: Any, delay_ms: float | None,
    delayed: list[str],
) -> dict | None:  # fmt: skip
    """The relay that gives the slots the master (when it is on loopback) and a proxy out,
    and runs their delay line when the slots have one (`delayed`: their addresses)."""
    host = target.hostname or "127.0.0.1"
    port = target.port or (443 if target.scheme == "https" else 80)
    read_end, write_end = os.pipe()
    argv = [sys.executable, "-m", "mlbench_master.cluster.local.relay"]
    argv += ["--ready-fd", str(write_end)]
    if host in LOOPBACK:
        argv += ["--target", f"{'127.0.0.1' if host == 'localhost' else host}:{port}"]
    if delayed:
        argv += ["--delay-ms", f"{float(delay_ms or 0):g}", "--addresses", ",".join(delayed)]
    argv += ["--proxy-port", str(PROXY_PORT), *namespaces]
    env = dict(os.environ)
    env[CLUSTER_MARK] = str(home)
    env[RELAY_MARK] = str(run.id)
    try:
        with open(_folder(home) / "relay.log", "ab") as log:
            proc = subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True, pass_fds=(write_end,),
            )  # fmt: skip
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    with os.fdopen(read_end, "rb") as ready:
        said = _first_line(ready, deadline=time.monotonic() + 15)
    if not said.startswith("ready"):
        why = _why(home, proc, said)
        proc.kill()
        proc.wait(timeout=10)  # gone (and reaped) before the run's failure is reported
        raise ClusterError(f"the worker slots' relay did not start: {why}")
    return {"pid": proc.pid, "proxy": f"http://127.0.0.1:{PROXY_PORT}"}


def _first_line(pipe: Any, deadline: float) -> str:
    """The first line the relay says on its readiness pipe ("" when it closed it unsaid or
    the deadline passed)."""
    said = b""
    while b"\n" not in said:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([pipe], [], [], left)[0]:
            break
        chunk = os.read(pipe.fileno(), 4096)
        if not chunk:
            break
        said += chunk
    return said.decode(errors="replace").strip()


def _why(home: Path, proc: subprocess.Popen, said: str) -> str:
    """What the relay said, else its log's last lines, else how it ended: never empty, since
    a reason is what a user reads first."""
    if said:
        return said
    try:
        with open(_folder(home) / "relay.log", "rb") as log:
            log.seek(max(0, os.fstat(log.fileno()).st_size - 400))
            tail = log.read(400).decode(errors="replace").strip("\0 \n")
    except OSError as exc:
        tail = f"its log cannot be read ({exc})"
    if tail:
        return tail
    code = proc.poll()
    if code is None:
        return "it said nothing within 15 s"
    return f"it exited with code {code} and wrote nothing to relay.log"


def rank_environment(home: Path) -> dict[str, str]:
    """What ranks inside the slots need besides the usual: the proxy to the outside world
    (data set downloads), never used for the master or the other slots."""
    record = read_record(home)
    if not record or not record.get("relay"):
        return {}
    proxy = record["relay"]["proxy"]
    direct = ",".join(["127.0.0.1", "localhost", "::1", *record.get("hosts", [])])
    return {
        "http_proxy": proxy, "https_proxy": proxy, "HTTP_PROXY": proxy, "HTTPS_PROXY": proxy,
        "no_proxy": direct, "NO_PROXY": direct,
    }  # fmt: skip


def read_record(home: Path) -> dict[str, Any] | None:
    """The slots' record: the run that owns them (while being built: {"run_id", "building"})."""
    try:
        return json.loads(_record_path(home).read_text())
    except (OSError, ValueError):
        return None


def launch_agent(home: Path) -> str | None:
    """mpirun's launch agent while slots exist (None: ranks start on this host as before)."""
    record = read_record(home)
    return f"sh {agent_path(home)}" if record and "hosts" in record else None


def _relays(home: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        env = environ_of(proc)
        if env.get(CLUSTER_MARK) == str(home) and RELAY_MARK in env:
            found.append(proc)
    return found


def close_slots(home: Path, run_id: int | str | None = None) -> list[str]:
    """Remove the slots (of run `run_id` only, when given); what was removed."""
    record = read_record(home)
    if run_id is not None and record and record.get("run_id") != str(run_id):
        return []
    kill_processes(lambda: _relays(home))
    removed = network.remove(home)
    _record_path(home).unlink(missing_ok=True)
    return removed


def release_leftovers(home: Path, active_run_ids: set[str]) -> list[str]:
    """Remove slots no active run owns (a crashed master's, or a run's whose job died)."""
    record = read_record(home)
    if record and record.get("run_id") in active_run_ids:
        return []
    if record is None and network.missing_capability():
        return []
    return close_slots(home)
