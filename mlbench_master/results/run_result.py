"""What the series statistics need of one run: plain data, read from the stored run by
stored.py and given to statistics.summarize (hand-made in the tests)."""

from __future__ import annotations

from dataclasses import dataclass, field

FINAL_STATES = ("FINISHED", "FAILED", "CANCELLED")


@dataclass(frozen=True)
class RunResult:
    """What the statistics need of one run, read from what the master stored."""

    run: int
    seed: int
    num_workers: int
    state: str
    time_to_target: float | None = None  # seconds on the benchmark clock; None: not reached
    accuracy_after_time: float | None = None  # the last validation accuracy measured
    throughput: float | None = None  # in the task's unit (images/s, samples/s)
    communication_share: float | None = None  # exposed communication / step time, 0..1
    curve: tuple[tuple[float, float], ...] = ()  # (seconds, validation accuracy)
    time_split: dict[str, float] = field(default_factory=dict)  # seconds per step
    evaluation: str = ""  # stored.EVALUATED, stored.SELF_REPORTED, or "" (no accuracy yet)
    mismatches: int = 0  # evaluations whose own accuracy strays from the grade (stored.py)
    price_per_hour: float | None = None  # its nodes' price (cost.py); None: not priced
    currency: str = ""
    not_priced: str = ""  # why it has no price ("not priced: ...")
    run_seconds: float | None = None  # start to end: what its nodes were held for

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def reached(self) -> bool:
        return self.final and self.time_to_target is not None
