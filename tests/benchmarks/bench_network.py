"""Benchmark: the network dimension on one machine (local worker slots with shaped links).

Two ranks, each in a worker slot of its own (cluster/local/network.py), started by mpirun
through the slots' launch agent exactly as the local driver starts them:

1. all-reduce bus bandwidth of a 16 MiB float32 buffer at a shaped 100 Mbit/s, per backend
   (mpi through mpi4py, gloo), against the rate itself (goal: at least 0.85 of it);
2. images/s, exposed and total communication share of the reference worker (ResNet-20,
   synthetic CIFAR-10, 2 workers) at 10, 100 and 1,000 Mbit/s and unlimited (the slots with
   no qdisc): the first local plot of the seed's network dimension;
3. latency: the time of a small (4 KiB) all-reduce at 0, 5 and 20 ms each way (netem, or
   the userspace delay line where the kernel has no netem), against the latency asked for,
   and the reference worker at 100 Mbit/s with those latencies.

The slots are opened as the local driver opens them (slots.open_slots: the network, the
relay and, for a latency without netem, its delay line).

Needs root (or CAP_NET_ADMIN); without it, it says so and measures nothing.
Usage: python tests/benchmarks/bench_network.py [--quick]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "benchmarks"))

from common import launcher_prefix, machine, mpi_env, worker_summary, write_results  # noqa: E402

from mlbench_master.cluster.base import RunSpec  # noqa: E402
from mlbench_master.cluster.local import network, slots  # noqa: E402

BUSBW_GOAL = 0.85
ALLREDUCE = r"""
import sys, time, numpy as np, torch
from mlbench_worker.training.comm import Communicator
comm = Communicator(sys.argv[1])
flat = torch.ones(int(sys.argv[2]) // 4)
comm.allreduce_(flat)
times = []
for _ in range(int(sys.argv[3])):
    comm.barrier(); start = time.perf_counter(); comm.allreduce_(flat)
    times.append(max(comm.allgather_object(time.perf_counter() - start)))
if comm.rank == 0:
    print("RESULT", min(times), flush=True)
comm.close()
"""


def slot_launcher(home: Path, hosts: list[str]) -> list[str]:
    """The mpirun prefix that starts one rank in each of the two slots `hosts`, through the
    slots' launch agent (common.launcher_prefix: the product's builder, untagged, no -x)."""
    agent = slots.agent_path(home)
    agent.parent.mkdir(parents=True, exist_ok=True)
    agent.write_text(slots.AGENT.replace("{tag}", network.home_tag(home)))
    return launcher_prefix(2, hosts, agent=f"sh {agent}")


def open_hosts(home: Path, mbit: int | None, latency_ms: float | None = None) -> list[str]:
    """Two slots linked at `mbit` (None: unshaped) with `latency_ms` each way, as the
    driver opens them; their host names."""
    slots.close_slots(home)
    run = RunSpec(id=1, num_workers=2, max_bandwidth=mbit, latency_ms=latency_ms)  # type: ignore[arg-type]
    if latency_ms and not slots.plan(run)["latency"]["applied"]:
        raise RuntimeError(f"a latency cannot be applied here: {slots.plan(run)['latency']}")
    return slots.open_slots(home, run, "http://127.0.0.1:9")


def allreduce_seconds(home: Path, hosts: list[str], backend: str, size: int, repeats: int) -> float:
    """The best time of one all-reduce of `size` bytes between the two slots."""
    argv = slot_launcher(home, hosts) + [
        sys.executable, "-c", ALLREDUCE, backend, str(size), str(repeats),
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, env=mpi_env(), timeout=600)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT")), None)
    if line is None:
        raise RuntimeError(done.stdout[-2000:] + done.stderr[-2000:])
    return float(line.split()[1])


def busbw(home: Path, mbit: int, backend: str, size: int, repeats: int) -> float:
    """Bus bandwidth in Mbit/s: for 2 ranks, 2(n-1)/n x size / time = size / time."""
    hosts = open_hosts(home, mbit)
    return size * 8 / allreduce_seconds(home, hosts, backend, size, repeats) / 1e6


def train(home: Path, mbit: int | None, images: int, latency_ms: float | None = None) -> dict:
    """The reference worker for one short epoch on the slots; its summary."""
    hosts = open_hosts(home, mbit, latency_ms)
    metrics = home / f"metrics-{mbit}-{latency_ms}.jsonl"
    argv = slot_launcher(home, hosts) + [
        sys.executable, "-m", "mlbench_worker", "resnet20-cifar10", "--dataset", "synthetic",
        "--train-images", str(images), "--test-images", "200", "--max-epochs", "1",
        "--threads", "1", "--metrics-file", str(metrics), "--log-every", "5",
    ]  # fmt: skip
    return worker_summary(argv, home, metrics, timeout=1800)


def training_row(link: str, summary: dict) -> list[str]:
    """A table row of the reference worker's summary on `link`."""
    share = f"comm {100 * summary.get('comm_share', 0):.1f} % exposed"
    if "comm_share_total" in summary:
        share += f", {100 * summary['comm_share_total']:.1f} % total"
    return [
        f"ResNet-20, 2 workers, {link}",
        f"{summary.get('images_per_sec') or 0:.0f} images/s",
        share,
        "",
    ]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    missing = network.missing_capability()
    if missing:
        print(f"bench_network: not measured: {missing}")
        write_results(
            "network", "The network dimension on one machine (2 worker slots, shaped links)",
            ["measure", "result", "ratio", "goal"], [["not measured", missing, "", ""]],
            {"machine": machine(), "not_measured": missing}, ratios=ratios({}, 16 << 20, missing),
        )  # fmt: skip
        return 0
    home = Path(tempfile.mkdtemp(prefix="mlbench-bench-network-"))
    rows: list[list] = []
    data: dict = {"machine": machine(), "busbw": {}, "training": {}}
    try:
        size = 4 << 20 if args.quick else 16 << 20
        for backend in ("mpi", "gloo"):
            value = busbw(home, 100, backend, size, 2 if args.quick else 3)
            data["busbw"][backend] = value
            rows.append(
                [f"all-reduce {size >> 20} MiB, {backend}, 100 Mbit/s", f"{value:.1f} Mbit/s",
                 f"{value / 100:.2f} of the rate", f">= {BUSBW_GOAL}"]
            )  # fmt: skip
        images = 1024 if args.quick else 2560
        for mbit in (10, 100, 1000, None):
            s = train(home, mbit, images)
            data["training"][str(mbit)] = s
            rows.append(training_row(f"{mbit or 'unlimited'} Mbit/s", s))
        data["latency"] = {"method": network.latency_method(), "allreduce": {}, "training": {}}
        for ms in (0, 5, 20):
            hosts = open_hosts(home, 1000, ms or None)
            seconds = allreduce_seconds(home, hosts, "gloo", 4096, 5 if args.quick else 20)
            data["latency"]["allreduce"][ms] = seconds
            rows.append(
                [f"all-reduce 4 KiB, gloo, {ms} ms each way ({network.latency_method()})",
                 f"{1e3 * seconds:.2f} ms", f"{seconds / (ms / 1e3):.2f} of the latency"
                 if ms else "", ">= 1 (one way at least)" if ms else ""]
            )  # fmt: skip
        for ms in (5, 20):
            s = train(home, 100, images, ms)
            data["latency"]["training"][ms] = s
            rows.append(training_row(f"100 Mbit/s, {ms} ms each way", s))
    finally:
        slots.close_slots(home)
    write_results(
        "network", "The network dimension on one machine (2 worker slots, shaped links)",
        ["measure", "result", "ratio", "goal"], rows, data, ratios=ratios(data, size),
    )  # fmt: skip
    return 0


def ratios(data: dict, size: int, missing: str = "") -> list[dict]:
    """The run's ratios against their goals (common.ratio): each measured against the link
    it was shaped to in the same run; None, with `missing`, where slots cannot be made."""
    from common import ratio

    out = []
    for backend in ("mpi", "gloo"):
        value = data.get("busbw", {}).get(backend)
        out.append(ratio(f"all-reduce {size >> 20} MiB, {backend}: bus bandwidth / the "
                         "shaped 100 Mbit/s", value and value / 100, f">= {BUSBW_GOAL}",
                         missing))  # fmt: skip
    for ms in (5, 20):
        seconds = data.get("latency", {}).get("allreduce", {}).get(ms)
        out.append(ratio(f"all-reduce 4 KiB, gloo: time / the {ms} ms latency each way",
                         seconds and seconds / (ms / 1e3), ">= 1", missing))  # fmt: skip
    return out


if __name__ == "__main__":
    sys.exit(main())
