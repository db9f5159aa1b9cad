"""A translation run (task 4b) travels as a signed bundle and is graded again on import:
the importing master scores the hypotheses with its own sacrebleu against the references
it regenerates, records both signatures, and a BLEU the origin stored wrongly is a
disagreement. Uses the two-installation fixtures of tests/bundles/."""

from __future__ import annotations

import pytest
from django.utils import timezone

from mlbench_master.api.models import Metric, Run
from tests.api.translation_bodies import (
    SEED,
    SIGNATURE,
    TASK,
    N,
    direct_bleu,
    pieces,
    references,
    text_file,
)
from tests.bundles import data
from tests.bundles.conftest import _settings, installations, staff  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db


def _graded_run(staff) -> tuple[Run, float]:  # noqa: F811
    plain = [" ".join(r.split()[1:]) for r in references()]  # each loses its first word
    run = Run.objects.create(name="mt", state=Run.STARTED, task=TASK, seed=SEED, test_examples=N)
    r = staff.post(
        f"/api/runs/{run.pk}/predictions/?dataset=synthetic",
        text_file([pieces(p) for p in plain], step=10),
        content_type="application/octet-stream",
    )
    assert r.status_code == 201, r.content
    Run.objects.filter(pk=run.pk).update(
        state=Run.FINISHED, finished_at=timezone.now(), dataset_used="synthetic"
    )
    return run, direct_bleu(plain, references())


@pytest.mark.parametrize("tampered", [False, True], ids=["honest", "tampered"])
def test_an_imported_translation_run_is_graded_again_here(installations, staff, tampered):  # noqa: F811
    run, bleu = _graded_run(staff)
    if tampered:  # the origin stored a BLEU its file does not earn
        Metric.objects.filter(run=run, name="evaluated_val_bleu").update(value=bleu + 20)
    bundle = data.export(staff, f"/api/runs/{run.pk}/bundle/")
    installations.use("here")
    body = data.post_bundle(staff, bundle)
    assert body.status_code == 201, body.content
    [imported] = body.json()["runs"]
    verdict = staff.get(f"/api/runs/{imported['id']}/").json()["origin"]["regrade"]
    assert verdict["status"] == "re-graded"
    [step] = verdict["steps"]
    assert step["here"] == {"evaluated_val_bleu": pytest.approx(bleu)}
    assert step["signature"] == {"here": SIGNATURE, "origin": SIGNATURE}
    assert step["agrees"] is (not tampered) and verdict["disagreements"] == int(tampered)
