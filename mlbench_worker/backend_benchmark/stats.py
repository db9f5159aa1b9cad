"""What a collective's timings mean: bus and algorithm bandwidth, latency, best and median.

The formulas are those of nccl-tests (NVIDIA's reference for collective benchmarks), so the
numbers read like the ones people already know:

- algorithm bandwidth = bytes of the message / time;
- bus bandwidth = algorithm bandwidth x the op's bus factor, the share of the message each
  rank must send over its link at least once: 2(n-1)/n for all-reduce (a reduce-scatter then
  an all-gather), 1 for broadcast. The bus bandwidth of a good implementation approaches
  the link's speed whatever n is, so it compares runs with different numbers of workers and
  a shaped link (e.g. 100 Mbit/s) with the ceiling it should reach.

Bandwidths are in Mbit/s (10^6 bits per second) like the platform's network setting
(`max_bandwidth`); latencies in microseconds. Each repeat's time is the slowest rank's (the
collective is done when every rank has it); `best` is the fastest repeat, what the hardware
can do, and `median` the typical one, robust against a stray slow repeat.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

OPS = ("allreduce", "broadcast")
OP_TITLES = {"allreduce": "all-reduce", "broadcast": "broadcast"}


def bus_factor(op: str, workers: int) -> float:
    """The share of the message each rank's link must carry (see the module's docstring)."""
    if workers < 2:
        raise ValueError("bandwidth between ranks needs at least 2 workers")
    if op == "allreduce":
        return 2.0 * (workers - 1) / workers
    if op == "broadcast":
        return 1.0
    raise ValueError(f"unknown op {op!r}; known: {', '.join(OPS)}")


def algbw_mbps(size: int, seconds: float) -> float:
    """Message bits per second, in Mbit/s."""
    if seconds <= 0:
        raise ValueError(f"a time must be positive, got {seconds}")
    return size * 8 / seconds / 1e6


def busbw_mbps(op: str, size: int, seconds: float, workers: int) -> float:
    """Bus bandwidth in Mbit/s: algorithm bandwidth x the op's bus factor."""
    return algbw_mbps(size, seconds) * bus_factor(op, workers)


def summarize(
    op: str,
    backend: str,
    size: int,
    workers: int,
    times: Sequence[float],
    *,
    warmup: int,
    capped: bool,
) -> dict:
    """One row of results from the repeats' times (seconds, each the slowest rank's)."""
    if not times:
        raise ValueError("no repeat was timed")
    best, median = min(times), statistics.median(times)
    return {
        "op": op,
        "backend": backend,
        "size": size,
        "workers": workers,
        "repeats": len(times),
        "warmup": warmup,
        "capped": capped,
        "latency_best_us": best * 1e6,
        "latency_median_us": median * 1e6,
        "algbw_best_mbps": algbw_mbps(size, best),
        "algbw_median_mbps": algbw_mbps(size, median),
        "busbw_best_mbps": busbw_mbps(op, size, best, workers),
        "busbw_median_mbps": busbw_mbps(op, size, median, workers),
    }
