"""A translation run (task 4b) on the run page and the compare page: its grades are BLEU,
not percentages, with sacrebleu's signature under them on the run page, and a run whose own
BLEU strays from the evaluator's grade shows both numbers."""

import datetime as dt

import pytest
from django.utils import timezone

from tests.browser.conftest import assert_accessible
from tests.browser.seed import store_points

pytestmark = pytest.mark.browser
SIGNATURE = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"


def test_the_run_page_shows_bleu_its_signature_and_the_disagreement(page):
    from mlbench_master.api.models import Run

    end = timezone.now() - dt.timedelta(minutes=5)
    run = Run.objects.create(
        name="translation", state=Run.FINISHED, task="transformer-wmt17", seed=3,
        num_workers=2, dataset_used="synthetic", test_examples=40,
        started_at=end - dt.timedelta(minutes=10), finished_at=end,
    )  # fmt: skip
    points = []
    for step, said, graded in ((100, 12.0, 12.0), (200, 30.0, 23.456)):
        meta = {"step": step, "epoch": step / 100, "elapsed": step * 1.5}
        date = (end - dt.timedelta(seconds=300 - step)).isoformat()
        points += [
            {"run_id": run.pk, "name": "val_bleu", "value": said, "date": date,
             "metadata": meta, "uid": f"said-{step}"},
            {"run_id": run.pk, "name": "evaluated_val_bleu", "value": graded, "date": date,
             "metadata": {**meta, "examples": 40, "dataset": "synthetic",
                          "signature": SIGNATURE}, "uid": f"graded-{step}"},
        ]  # fmt: skip
    store_points(points)

    page.goto(f"/runs/{run.pk}/")
    box = page.locator("#run-evaluation")
    box.wait_for(state="visible")
    text = box.inner_text()
    assert "Graded by the platform's evaluator: 2 evaluations, last BLEU 23.46" in text, text
    assert f"BLEU computed by the evaluator with sacrebleu, signature {SIGNATURE}." in text
    assert (
        "Mismatch at step 200: the run reported BLEU 30.00, the evaluator graded BLEU 23.46 "
        "(tolerance 0.05 BLEU)." in text
    ), text
    assert "Mismatch at step 100" not in text
    page.wait_for_function(
        "Number(document.querySelector('#chart-bleu')?.dataset.points) > 0"
    )  # both series drawn: the grades and the run's own
    assert "Validation BLEU (sacrebleu)" in page.locator("#chart-bleu figcaption").inner_text()
    assert_accessible(page)

    # The compare table shows the same numbers as BLEU too, never as percentages.
    page.goto(f"/compare/?runs={run.pk}")
    page.wait_for_selector("body[data-loaded='1']")
    row = page.locator(f"#compare-table tr[data-run-id='{run.pk}']")
    row.wait_for()
    mark = row.locator(".graded.mismatch").inner_text()
    assert "mismatch at step 200: reported 30.00 BLEU, graded 23.46 BLEU" in mark, mark
    assert "23.46 BLEU" in row.inner_text() and "%" not in row.locator(".after").inner_text()
