"""The framework dimension in `mlbench report` and the words the CLI shows a run's
implementation in: the implementation with its framework and version, no speed-up between
implementations unless the cross-implementation ratio is asked for, and then labelled.
(Which runs compare is held to the dashboard's rule by tests/rules/comparison_cases.json.)"""

from mlbench_worker.client.cli.comparison import report_table
from mlbench_worker.client.cli.formatting import (
    framework_text,
    implementation_of,
    implementation_text,
)


def _run(run_id: int, workers: int, implementation: str | None, ttt: float, **summary) -> dict:
    run = {
        "id": run_id, "name": f"run {run_id}", "state": "FINISHED", "num_workers": workers,
        "task": "resnet20-cifar10", "backend": "gloo", "num_cpus": 1.0,
        "dataset_used": "cifar10",
        "summary": {"time_to_target": ttt, "images_per_sec": 300.0 * workers, **summary},
    }  # fmt: skip
    if implementation is not None:
        run["implementation"] = implementation
    return run


def test_the_implementation_is_said_with_its_framework_and_version():
    # The workers' version first: they are what trained.
    ddp = {
        "implementation": "torch-ddp",
        "summary": {"versions": {"python": "3.11", "torch": "2.3.1"}},
        "manifest": {"framework": {"name": "pytorch", "version": "2.3.0"}},
    }
    assert implementation_text(ddp) == "torch-ddp (PyTorch 2.3.1)"
    # Before the workers reported: the master's, else said to be unknown.
    tf = {"implementation": "tensorflow", "manifest": {"framework": {"name": "tensorflow"}}}
    assert framework_text(tf) == "TensorFlow, version not reported yet"
    tf["manifest"]["framework"]["version"] = "2.16.1"
    assert implementation_text(tf) == "tensorflow (TensorFlow 2.16.1)"
    # A run stored before implementations existed: the reference loop, on the torch it had.
    old = {"summary": {"versions": {"torch": "2.1.0"}}}
    assert (implementation_of(old), implementation_text(old)) == (
        "reference",
        "reference (PyTorch 2.1.0)",
    )
    # A custom command or a measurement has none.
    assert implementation_text({"implementation": ""}) == ""


def test_report_gives_no_speed_up_across_implementations_unless_asked():
    runs = [_run(1, 1, "reference", 100.0), _run(2, 2, "torch-ddp", 50.0), _run(3, 2, None, 55.0)]
    table = report_table(None, runs)
    assert "IMPLEMENTATION" in table.splitlines()[0]
    row = next(line for line in table.splitlines() if line.startswith("2 "))
    assert "torch-ddp" in row and "2.00x" not in row
    assert (
        "speed-up of run 2: no 1-worker run listed with the same implementation "
        "(--across-implementations gives the cross-implementation ratio)"
    ) in table
    # A run without the field is a reference run: compared with run 1 as before.
    assert "1.82x" in next(line for line in table.splitlines() if line.startswith("3 "))

    across = report_table(None, runs, across_implementations=True)
    row = next(line for line in across.splitlines() if line.startswith("2 "))
    assert "2.00x vs reference (cross-implementation)" in row
    assert "speed-up of run 2 is a cross-implementation ratio (against run 1, reference)" in across
    assert "1.82x" in next(line for line in across.splitlines() if line.startswith("3 "))
    assert "speed-up of run 3 is" not in across  # the same implementation: a plain speed-up
