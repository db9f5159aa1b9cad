"""Who graded a run, in `mlbench report` and `mlbench show`: the evaluator's time to target
and accuracy where it graded the run, a mismatch with both numbers, and a run graded only by
itself marked "self-reported, not evaluated"."""

from mlbench_worker.client.cli.accuracy import evaluation_line, evaluation_notes
from mlbench_worker.client.cli.comparison import report_table


def _run(run_id: int, workers: int, ttt: float, evaluation: dict | None = None) -> dict:
    run = {
        "id": run_id, "name": f"run {run_id}", "state": "FINISHED", "num_workers": workers,
        "task": "resnet20-cifar10", "backend": "gloo", "num_cpus": 1.0,
        "dataset_used": "synthetic", "implementation": "reference",
        "summary": {
            "time_to_target": ttt, "final_val_accuracy": 0.99, "elapsed": 90.0,
            "images_per_sec": 300.0 * workers,
        },
    }  # fmt: skip
    if evaluation is not None:
        run["evaluation"] = {"tolerance": 0.005, "mismatches": [], **evaluation}
    return run


GRADED = {"status": "evaluated", "grades": 3}


def test_report_reads_the_evaluators_numbers_and_marks_the_others():
    honest = _run(1, 1, 100.0, {**GRADED, "time_to_target": 100.0,
                                "accuracy_after_time": 0.81, "elapsed": 120.0})  # fmt: skip
    liar = _run(2, 2, 10.0, {
        **GRADED, "time_to_target": None, "accuracy_after_time": 0.1, "elapsed": 90.0,
        "mismatches": [{"step": 30, "reported": 0.99, "graded": 0.1}],
    })  # fmt: skip
    unchecked = _run(3, 2, 50.0, {"status": "self-reported, not evaluated", "grades": 0})
    table = report_table(None, [honest, liar, unchecked])
    rows = {line.split()[0]: line for line in table.splitlines() if line[:1].isdigit()}
    assert "1m40s" in rows["1"] and "81.0% @ 2m00s" in rows["1"]
    assert "not reached" in rows["2"] and "10.0% @ 1m30s" in rows["2"]
    assert "10.00x" not in rows["2"]  # its claimed 10 s gives it no speed-up
    assert "99.0% @ 1m30s *" in rows["3"] and "2.00x" in rows["3"]
    assert (
        "run 2 MISMATCH at step 30: it reported 99.0%, the evaluator graded 10.0% "
        "(tolerance 0.5 points)"
    ) in table
    assert "* run 3: self-reported, not evaluated" in table


def test_show_says_who_graded_the_run():
    liar = _run(2, 2, 10.0, {**GRADED, "time_to_target": None, "accuracy_after_time": 0.1})
    assert evaluation_line(liar) == (
        "the evaluator (3 evaluations graded; last 10.0%, target not reached)"
    )
    assert evaluation_line(_run(3, 2, 5.0, {"status": "self-reported, not evaluated"})) == (
        "the run itself: self-reported, not evaluated"
    )
    assert evaluation_line(_run(4, 2, 5.0)) == ""  # a master older than the evaluator
    assert evaluation_notes(_run(4, 2, 5.0)) == []
