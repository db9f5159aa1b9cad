"""Local worker slots as hosts of their own: one network namespace per slot, on a bridge.

Why: on one machine every rank would otherwise talk to the others through loopback or shared
memory, so a run's `max_bandwidth` and `latency` could not be measured at all. In a
namespace of its own each slot has its own address and its own link (a veth pair to a
bridge), and MPI and gloo traffic between slots crosses those links over TCP, as between
pods. The link's egress is shaped with `tc` inside the slot by the rule both drivers use
(cluster/shaping.py): the run's rate, and for a `latency` a netem delay where the kernel has
one. Where it has none, the slots reach each other through a TUN device each instead
(`delay_line.DEVICE`, a /32 route per other slot), shaped by the same rule without netem,
and the userspace delay line (delay_line.py) holds each packet for the latency. Traffic to
the gateway (the launcher's control connections) is spared, like the master is spared on
Kubernetes.

Everything is named after the master's home (`mlb-<tag>-<slot>` namespaces, `mlb<tag>`
bridge and `mlb<tag>h<slot>` host ends), so two masters on one machine never touch each
other's slots, and what a crash left behind is found by name. The addresses come from
198.18.0.0/15, the range RFC 2544 sets aside for network benchmarks: one /24 per master,
chosen so that it overlaps no route of the machine; the machine's own interfaces and routes
are never changed (the bridge adds one interface and its own /24 route, removed with it).
`ip netns exec` makes /etc/netns/<namespace>/hosts the slot's /etc/hosts, so every slot
resolves every other slot's name (rank 0's address for gloo's rendezvous).
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from mlbench_master.cluster import shaping
from mlbench_master.cluster.base import ClusterError
from mlbench_master.cluster.local import delay_line

BENCHMARK_RANGE = ipaddress.ip_network("198.18.0.0/15")  # RFC 2544
FIRST_HOST = 10  # slot i has address .(10 + i); .1 is the bridge (gateway)
MAX_SLOTS = 240
NETNS_ETC = Path("/etc/netns")
TUN = Path("/dev/net/tun")
CAP_NET_ADMIN = 12  # links, addresses, routes, qdiscs
CAP_SYS_ADMIN = 21  # `ip netns add` mounts, `unshare --uts`


@dataclass(frozen=True)
class Layout:
    """The names and addresses of one master's slots."""

    tag: str  # 6 hex digits of the master's home
    subnet: ipaddress.IPv4Network
    slots: int
    delay_line: bool = False  # slots reach each other through delay_line.DEVICE

    @property
    def bridge(self) -> str:
        return f"mlb{self.tag}"

    @property
    def gateway(self) -> str:
        return str(self.subnet[1])

    def namespace(self, slot: int) -> str:
        return f"mlb-{self.tag}-{slot}"

    def host_end(self, slot: int) -> str:
        return f"mlb{self.tag}h{slot}"

    def address(self, slot: int) -> str:
        return str(self.subnet[FIRST_HOST + slot])

    def hosts_file(self) -> str:
        lines = ["127.0.0.1 localhost", "::1 localhost"]
        lines += [f"{self.address(i)} {self.namespace(i)}" for i in range(self.slots)]
        return "\n".join(lines) + "\n"

    def record(self) -> dict:
        return {
            "tag": self.tag, "subnet": str(self.subnet), "slots": self.slots,
            "delay_line": self.delay_line,
        }  # fmt: skip


def home_tag(home: Path) -> str:
    """Six hex digits naming one master's network objects (from its home's path)."""
    return hashlib.sha256(str(Path(home).resolve()).encode()).hexdigest()[:6]


def missing_capability() -> str | None:
    """Why this process cannot build slot networks, or None when it can."""
    if not _has_capabilities(CAP_NET_ADMIN, CAP_SYS_ADMIN):  # a container's root may lack them
        return "the master runs without root (CAP_NET_ADMIN and CAP_SYS_ADMIN)"
    for tool in ("ip", "tc", "unshare", "hostname"):
        if shutil.which(tool) is None:
            return f"the `{tool}` command is not installed"
    return None


def _has_capabilities(*capabilities: int) -> bool:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                effective = int(line.split()[1], 16)
                return all(effective >> cap & 1 for cap in capabilities)
    except (OSError, ValueError):
        pass
    return False


def latency_support() -> str | None:
    """Why a latency cannot be applied here, or None: by netem where the kernel has it,
    else by the userspace delay line, which needs the TUN device."""
    missing = netem_missing()
    if missing is None or _tun_opens():
        return None
    return (
        f"{missing}, and {TUN} cannot be opened for the userspace delay line "
        "(`modprobe tun`; in a container, give it the device: --device /dev/net/tun)"
    )


def _tun_opens() -> bool:
    try:
        os.close(os.open(TUN, os.O_RDWR))
    except OSError:
        return False
    return True


def latency_method() -> str:
    """How a latency is applied here (when `latency_support` allows one)."""
    return "netem" if netem_missing() is None else "userspace delay line"


@functools.cache
def netem_missing() -> str | None:
    """Why the kernel cannot delay packets with netem, or None when it can.

    Asked of the kernel itself, once per process (the kernel does not change under it): a
    throwaway namespace gets a netem qdisc on its loopback.
    """
    probe = f"mlb-probe-{os.getpid()}"
    if _run(["ip", "netns", "add", probe], "a probe namespace", check=False).returncode:
        return "network namespaces cannot be created here"
    try:
        done = _run(
            _ns(probe, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"),
            "probing netem",
            check=False,
        )
    finally:
        _run(["ip", "netns", "delete", probe], "removing the probe namespace", check=False)
    if done.returncode:
        return f"this kernel has no netem qdisc to delay packets ({done.stderr.strip()})"
    return None


def _run(argv: list[str], what: str, check: bool = True) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except FileNotFoundError as exc:
        done = subprocess.CompletedProcess(argv, 127, "", str(exc))
    if check and done.returncode != 0:
        raise ClusterError(f"{what} failed: `{' '.join(argv)}`: {done.stderr.strip()}")
    return done


def _ns(namespace: str, *argv: str) -> list[str]:
    return ["ip", "netns", "exec", namespace, *argv]


def used_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network the machine routes or has an address in (never to be overlapped)."""
    found: list[ipaddress.IPv4Network] = []
    for argv in (["ip", "-j", "-4", "route", "show", "table", "all"], ["ip", "-j", "-4", "addr"]):
        done = _run(argv, "reading the machine's networks", check=False)
        try:
            entries = json.loads(done.stdout or "[]")
        except ValueError:
            continue
        for entry in entries:
            prefixes = [entry.get("dst")] if "dst" in entry else []
            for info in entry.get("addr_info", []):
                prefixes.append(f"{info.get('local')}/{info.get('prefixlen')}")
            for prefix in prefixes:
                if not prefix or prefix == "default":
                    continue
                try:
                    found.append(ipaddress.ip_network(prefix, strict=False))
                except ValueError:
                    continue
    return found


def choose_subnet(tag: str, used: list[ipaddress.IPv4Network]) -> ipaddress.IPv4Network:
    """This master's /24 of the benchmark range: the tag's own one, or the next free one."""
    subnets = list(BENCHMARK_RANGE.subnets(new_prefix=24))
    start = int(tag, 16) % len(subnets)
    for k in range(len(subnets)):
        candidate = subnets[(start + k) % len(subnets)]
        if not any(candidate.overlaps(u) for u in used):
            return candidate
    raise ClusterError("no free /24 is left in 198.18.0.0/15 for the worker slots' network")


def existing(tag: str) -> tuple[list[str], list[str]]:
    """(namespaces, links) with this tag that exist now."""
    done = _run(["ip", "netns", "list"], "listing network namespaces", check=False)
    namespaces = [
        line.split()[0]
        for line in done.stdout.splitlines()
        if line.split() and line.split()[0].startswith(f"mlb-{tag}-")
    ]
    done = _run(["ip", "-j", "link"], "listing links", check=False)
    try:
        links = [entry["ifname"] for entry in json.loads(done.stdout or "[]")]
    except (ValueError, KeyError):
        links = []
    return namespaces, [name for name in links if name.startswith(f"mlb{tag}")]


def create(
    home: Path,
    slots: int,
    mbit: int | None,
    latency_ms: float | None,
    spared: list[str] | None = None,
) -> Layout:
    """Namespaces for `slots` slots on a new bridge, each link shaped to `mbit` Mbit/s with
    `latency_ms` of delay each way (None: not shaped). Anything of this master's left over
    is removed first; on failure everything made so far is removed again."""
    if not 1 <= slots <= MAX_SLOTS:
        raise ClusterError(f"a slot network has 1 to {MAX_SLOTS} slots, not {slots}")
    tag = home_tag(home)
    remove(home)
    delayed = bool(latency_ms) and netem_missing() is not None
    layout = Layout(tag, choose_subnet(tag, used_networks()), slots, delay_line=delayed)
    try:
        _build(layout, mbit, latency_ms, list(spared or []))
    except BaseException:
        remove(home)
        raise
    return layout


def _build(layout: Layout, mbit: int | None, latency_ms: float | None, spared: list[str]) -> None:
    prefix = layout.subnet.prefixlen
    bridge = layout.bridge
    _run(["ip", "link", "add", bridge, "type", "bridge"], "creating the slots' bridge")
    _run(["ip", "addr", "add", f"{layout.gateway}/{prefix}", "dev", bridge], "addressing it")
    _run(["ip", "link", "set", bridge, "up"], "starting the bridge")
    for slot in range(layout.slots):
        ns, host_end, inner = (
            layout.namespace(slot),
            layout.host_end(slot),
            f"mlb{layout.tag}t{slot}",
        )
        etc = NETNS_ETC / ns
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text(layout.hosts_file())
        _run(["ip", "netns", "add", ns], f"creating namespace {ns}")
        _run(["ip", "link", "add", host_end, "type", "veth", "peer", "name", inner], "a veth pair")
        _run(["ip", "link", "set", inner, "netns", ns], f"moving the link into {ns}")
        _run(["ip", "link", "set", host_end, "master", bridge, "up"], "plugging it in")
        _run(["ip", "-n", ns, "link", "set", inner, "name", "eth0"], "naming the slot's link")
        _run(
            ["ip", "-n", ns, "addr", "add", f"{layout.address(slot)}/{prefix}", "dev", "eth0"],
            f"addressing {ns}",
        )
        _run(["ip", "-n", ns, "link", "set", "eth0", "up"], f"starting {ns}'s link")
        _run(["ip", "-n", ns, "link", "set", "lo", "up"], f"starting {ns}'s loopback")
        _run(["ip", "-n", ns, "route", "add", "default", "via", layout.gateway], "a route")
        if layout.delay_line:
            _join_delay_line(layout, slot, mbit)
        elif mbit or latency_ms:
            for line in shaping.tc_lines("eth0", mbit, latency_ms, [layout.gateway, *spared]):
                _run(_ns(ns, *line.split()), f"shaping {ns}'s link")


def _join_delay_line(layout: Layout, slot: int, mbit: int | None) -> None:
    """Route the other slots through the slot's TUN device, shaped to `mbit` (the delay
    line, started with the relay, is the wire between the devices)."""
    ns, dev = layout.namespace(slot), delay_line.DEVICE
    _run(["ip", "-n", ns, "tuntap", "add", "dev", dev, "mode", "tun"], f"a TUN device in {ns}")
    _run(["ip", "-n", ns, "link", "set", dev, "mtu", str(delay_line.MTU), "up"], "starting it")
    for other in range(layout.slots):
        if other != slot:
            route = [f"{layout.address(other)}/32", "dev", dev, "src", layout.address(slot)]
            _run(["ip", "-n", ns, "route", "add", *route], f"routing {ns} to its peers")
    if mbit:
        for line in shaping.tc_lines(dev, mbit, None, []):
            _run(_ns(ns, *line.split()), f"shaping {ns}'s delay line")


def remove(home: Path) -> list[str]:
    """Remove every namespace, link and hosts file of this master's slots; what was removed.

    Idempotent: safe at a run's end, on a cancel, and at master start (left-overs of a crash).
    Deleting a namespace deletes its veth end, which deletes the pair; the bridge goes last.
    """
    tag = home_tag(home)
    namespaces, links = existing(tag)
    removed = []
    for ns in namespaces:
        _run(["ip", "netns", "delete", ns], f"removing namespace {ns}", check=False)
        removed.append(ns)
    for etc in NETNS_ETC.glob(f"mlb-{tag}-*"):
        shutil.rmtree(etc, ignore_errors=True)
    # A deleted namespace's links go away asynchronously: wait for them, then remove what
    # is still there (a bridge; a veth whose namespace was already gone).
    deadline = time.monotonic() + 5
    _, links = existing(tag)
    while any(name != f"mlb{tag}" for name in links) and time.monotonic() < deadline:
        time.sleep(0.05)
        _, links = existing(tag)
    for link in sorted(links, key=lambda name: name == f"mlb{tag}"):
        _run(["ip", "link", "delete", link], f"removing link {link}", check=False)
        removed.append(link)
    return removed
