"""Who graded a run, on the run page and the compare page: the evaluator's grades are the
run's accuracy and time to target, a run whose own accuracy strays from them shows both
numbers, its model's ONNX audit is said (a mismatch with the differing rows), and a run that
wrote no predictions is labelled "self-reported, not evaluated"."""

import pytest

from tests.browser.conftest import assert_accessible, screenshot
from tests.browser.seed import make_run, store_points

pytestmark = pytest.mark.browser


def grade(run, value: float | None = None) -> None:
    """The evaluator's grade beside each accuracy the run reported: the same number
    (an honest run), or `value` (a run whose predictions say otherwise)."""
    from mlbench_master.api.models import Metric

    reported = Metric.objects.filter(run=run, name="val_accuracy").order_by("date")
    store_points(
        {
            "run_id": run.pk,
            "name": "evaluated_val_accuracy",
            "value": m.value if value is None else value,
            "date": m.date.isoformat(),
            "metadata": m.metadata,
            "uid": f"graded-{m.pk}",
        }  # fmt: skip
        for m in reported
    )


def audit(run, result: dict) -> None:
    """The stored ONNX audit of the run's model, as the master's audit writes it."""
    from mlbench_master.grading import model_files

    model_files.folder(run.pk).mkdir(parents=True, exist_ok=True)
    model_files.write_audit(model_files.folder(run.pk), result)


AUDITED = {"step": 100, "examples": 2000, "sample": True, "ties": 0, "dataset": "synthetic"}


def test_the_run_and_compare_pages_say_who_graded_each_run(page, settings, tmp_path):
    settings.MLBENCH_HOME = tmp_path  # the audits written below, and nothing elsewhere
    honest = make_run("honest", 2, ago=5400)
    liar = make_run("claims 93 %", 2, ago=3600)
    unchecked = make_run("no predictions", 2, ago=1800)
    grade(honest)
    grade(liar, 0.1)
    # Evaluated under --amp: its near-ties within bf16's tolerance are said.
    honest_audit = {"status": "matches", "differ": 0, "first_rows": [], "precision": "bf16"}
    audit(honest, AUDITED | honest_audit | {"ties": 4})
    audit(liar, AUDITED | {"status": "mismatch", "differ": 1790, "first_rows": [0, 2, 5]})

    page.goto(f"/runs/{liar.pk}/")
    box = page.locator("#run-evaluation")
    box.wait_for(state="visible")
    text = box.inner_text()
    assert "Graded by the platform's evaluator: 10 evaluations, last 10.0 %" in text, text
    assert "target not reached" in text
    assert "Mismatch at step 100: the run reported 28.0 %, the evaluator graded 10.0 %" in text
    assert (
        "Model audit: the final model MISMATCH: predicts otherwise than submitted on a seeded "
        "sample of 2000 test examples of step 100; 1790 differ (first rows 0, 2, 5)." in text
    ), text
    assert_accessible(page)

    page.goto(f"/runs/{honest.pk}/")
    page.locator("#run-evaluation").wait_for(state="visible")
    text = page.locator("#run-evaluation").inner_text()
    assert "the final model gives the submitted predictions on a seeded sample of 2000" in text
    assert "0 differ; evaluated in bf16: 4 near-ties allowed." in text, text

    page.goto(f"/runs/{unchecked.pk}/")
    page.locator("#run-evaluation").wait_for(state="visible")
    text = page.locator("#run-evaluation").inner_text()
    assert "Self-reported, not evaluated" in text and "Model audit" not in text

    page.goto(f"/compare/?runs={honest.pk},{liar.pk},{unchecked.pk}")
    page.wait_for_selector("body[data-loaded='1']")
    page.wait_for_function("Number(document.querySelector('#chart-compare').dataset.points) > 0")
    row = {
        r.pk: page.locator(f"#compare-table tr[data-run-id='{r.pk}']")
        for r in (honest, liar, unchecked)
    }
    assert row[liar.pk].locator(".ttt").inner_text().startswith("not reached")
    assert "mismatch at step 100" in row[liar.pk].locator(".graded.mismatch").inner_text()
    assert row[honest.pk].locator(".graded").count() == 0
    assert not row[honest.pk].locator(".ttt").inner_text().startswith("not reached")
    assert "self-reported, not evaluated" in row[unchecked.pk].locator(".graded.self").inner_text()
    screenshot(page, "compare-evaluated")
