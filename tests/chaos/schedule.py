"""The seeded fault scheduler: which faults come, in which order, how far apart and how
long each holds, all drawn from one seed before the series starts.

The same seed gives the same plan, so a failing series is replayed with its seed (the
targets a fault finds still depend on where the runs are at that moment). Every kind in the
plan's list comes once per round, in an order the seed shuffles, so a long series covers
them all. Each fault is written to a JSON-lines log with the seed as it is done: the first
line holds the seed and the plan's settings.
"""

from __future__ import annotations

import json
import random
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.chaos.faults import INJECTORS, Fault, Stage

HOLD = (1.0, 4.0)  # seconds a pause, an outage, a full disk or a dropped link lasts


def plan(seed: int, count: int, kinds: tuple[str, ...], gap: tuple[float, float]) -> list[Fault]:
    """`count` faults of `kinds`, `gap` seconds apart (uniformly drawn), from `seed`."""
    unknown = set(kinds) - set(INJECTORS)
    if unknown:
        raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: {', '.join(INJECTORS)}")
    if not kinds and count:
        raise ValueError("no fault kinds to draw from")
    rng = random.Random(f"faults-{seed}")
    order: list[str] = []
    while len(order) < count:
        round_ = list(kinds)
        rng.shuffle(round_)
        order += round_
    return [
        Fault(n, kind, delay=round(rng.uniform(*gap), 2), hold=round(rng.uniform(*HOLD), 2),
              pick=rng.random())
        for n, kind in enumerate(order[:count])
    ]  # fmt: skip


class FaultLog:
    """The faults as they are done, one JSON line each, beside the seed."""

    def __init__(self, path: Path, seed: int, settings: dict[str, Any]) -> None:
        self.path = path
        self.seed = seed
        path.write_text(json.dumps({"seed": seed, **settings}) + "\n")

    def write(self, fault: Fault) -> None:
        with open(self.path, "a") as fh:
            fh.write(json.dumps({"seed": self.seed, **fault.record()}) + "\n")

    def text(self) -> str:
        return self.path.read_text()


def inject_all(
    faults: list[Fault], stage: Stage, log: FaultLog, done: Callable[[], bool]
) -> list[Fault]:
    """Do the planned faults in order, each `delay` seconds after the previous one, until
    the plan ends or `done()` (every run ended); the faults done, each logged as it ends.
    An injector that raises is logged with its error and the series goes on: the
    invariants judge what happened."""
    injected = []
    for fault in faults:
        deadline = time.monotonic() + fault.delay
        while time.monotonic() < deadline and not done():
            time.sleep(0.2)
        if done():
            break
        fault.start = time.time()
        try:
            if fault.kind in stage.unable:
                fault.skipped = stage.unable[fault.kind]
            else:
                INJECTORS[fault.kind](stage, fault)
        except Exception as exc:  # noqa: BLE001 - recorded; the series goes on
            fault.details["error"] = "".join(traceback.format_exception_only(exc)).strip()
        fault.end = time.time()
        log.write(fault)
        injected.append(fault)
    return injected
