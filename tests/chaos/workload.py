"""The runs a chaos series queues: every task of the catalogue in a fast form, several
implementations and algorithms, and cheap commands of the open division.

Training runs are the real worker started as an open-division command, so that rank 0
also writes every point it measures (with the uid it posts) to a JSON-lines file: what it
measured is then known point by point, not assumed, when the stored points are checked. A
few runs are asked by their task fields as a user would (the master builds the command);
the worker keeps no file of their points, so for them only doubles are checked, and that
the summary, the last thing a rank posts, arrived.

Every run of a task is created with `test_examples`, the size of the test set it is graded
on, fixed before it starts: the count its command evaluates on (`--test-images`,
`--test-samples`, `--test-tokens` of `_FAST`), or for a run asked by its task fields the
count the master then passes to the worker. The master refuses a predictions file, or a
language model's validation stream, of any other size.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlbench_worker.shared import catalogue

# Seconds a queued run may take at most (start-up on a busy 2-core machine included).
TIME_LIMIT = 600
WORKER = "python -m mlbench_worker"
# The fast form of each task family: generated data, a few images, one epoch.
_FAST = {
    "cifar10": "--train-images 256 --test-images 128",
    "imagenet": "--train-images 16 --test-images 8 --crop 64 --batch-size 4",
    "epsilon": "--train-samples 2048 --test-samples 512",
    "wikitext2": "--vocab-size 200 --train-tokens 40000 --test-tokens 4000 --batch-size 8",
    "wmt17": "--train-samples 400 --test-samples 16 --batch-size 512",
}
# Tasks whose default model is too big for the fast form: their smoke-test size.
_SMALL_MODEL = {
    "awd-lstm-wikitext2": "awd-lstm-tiny",
    "gpt-wikitext2": "gpt-tiny",
    "transformer-wmt17": "transformer-small",
}
_COMMON = "--dataset synthetic --max-epochs 1 --threads 1 --log-every 1"
# The worker's flag for the size of its test set (task 3 counts validation tokens).
_TEST_SIZE = re.compile(r"--test-(?:images|samples|tokens) (\d+)")


def graded_examples(worker_args: str) -> int | None:
    """The test examples a worker command evaluates on: what its run's `test_examples`
    must be (None: the command names no test set, e.g. a measurement's)."""
    found = _TEST_SIZE.findall(worker_args)
    return int(found[-1]) if found else None


@dataclass(frozen=True)
class Entry:
    """One kind of run: its label and either the worker's arguments (a training command
    whose points rank 0 also writes to a file) or the fields a user would POST."""

    label: str
    worker_args: str = ""  # after `python -m mlbench_worker`
    fields: dict[str, Any] = field(default_factory=dict)  # a run asked by its task fields
    command: str = ""  # a plain open-division command
    all_nodes: bool = True  # the command runs on every worker (else on one)

    def request(self, points_dir: Path) -> tuple[dict[str, Any], str | None]:
        """The POST body and the file rank 0 writes its points to (None: no file)."""
        body: dict[str, Any] = {"name": f"chaos {self.label}", "queue": True}
        body.update(num_workers=2, num_cpus=1, time_limit=TIME_LIMIT)
        if self.fields:
            return {**body, **self.fields}, None
        if self.command:
            return {
                **body,
                "custom_image_command": self.command,
                "run_all_nodes": self.all_nodes,
            }, None
        points = str(points_dir / "points-{run_id}.jsonl")
        command = f"{WORKER} {self.worker_args} --metrics-file {points}"
        # The run's task is the one the command trains: the master takes its summary and
        # grades its predictions by it (another task's would be refused, rightly).
        task = self.worker_args.split()[0]
        size = graded_examples(self.worker_args)
        return {
            **body, "task": task, "custom_image_command": command, "run_all_nodes": True,
            **({"test_examples": size} if size is not None else {}),
        }, points  # fmt: skip


def _fast(task: catalogue.TaskInfo) -> str:
    model = _SMALL_MODEL.get(task.name)
    return _FAST[task.dataset] + (f" --model {model}" if model else "")


def entries() -> list[Entry]:
    """Every kind of run the series draws from."""
    found = [
        Entry(f"{t.name}", f"{t.name} {_COMMON} {_fast(t)}")
        for t in catalogue.TASKS.values()
        if not t.measurement
    ]
    cifar = f"resnet20-cifar10 {_COMMON} {_FAST['cifar10']}"
    epsilon = f"logreg-epsilon {_COMMON} {_FAST['epsilon']}"
    found += [
        Entry("resnet20 torch-ddp", f"{cifar} --implementation torch-ddp"),
        Entry("resnet20 tensorflow", f"{cifar} --implementation tensorflow"),
        Entry("resnet20 powersgd", f"{cifar} --algorithm powersgd --algorithm-option rank=2"),
        Entry("resnet20 signsgd gloo", f"{cifar} --algorithm signsgd --backend gloo"),
        Entry("logreg topk", f"{epsilon} --algorithm topk --algorithm-option density=0.05"),
        Entry("logreg localsgd", f"{epsilon} --algorithm localsgd --algorithm-option period=2"),
        Entry("logreg decentralized", f"{epsilon} --algorithm decentralized"),
        Entry(
            "backend-benchmark",
            "backend-benchmark --max-size 64KiB --repeats 3 --warmup 1 --time-budget 10",
        ),
        Entry(
            "logreg topk (task fields)",
            fields={
                "task": "logreg-epsilon",
                "dataset": "synthetic",
                "target": "light",
                "algorithm": "topk",
                "algorithm_options": {"density": 0.02},
                "max_epochs": 1,
                "test_examples": graded_examples(_FAST["epsilon"]),
            },
        ),  # fmt: skip
        Entry("python -c pass", command="python -c pass", all_nodes=False),
        Entry("sleep 3 on every rank", command="sleep 3"),
    ]
    return found


def draw(seed: int, count: int, labels: tuple[str, ...] = ()) -> list[Entry]:
    """`count` runs: every kind once per round (in the seed's order), as often as needed;
    only the kinds named in `labels` when given."""
    pool = [e for e in entries() if not labels or e.label in labels]
    missing = set(labels) - {e.label for e in pool}
    if missing:
        known = ", ".join(e.label for e in entries())
        raise ValueError(f"no run kind called {sorted(missing)}; known: {known}")
    rng = random.Random(f"workload-{seed}")
    chosen: list[Entry] = []
    while len(chosen) < count:
        round_ = list(pool)
        rng.shuffle(round_)
        chosen += round_
    return chosen[:count]
