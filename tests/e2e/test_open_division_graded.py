"""An open-division command through the embedded master: what it says of itself is not its
result. Random predictions are graded about 10 % and the run does not reach its target,
whatever it posted, and the ONNX model it posts beside them does not make them (the audit:
mismatch); a command that writes no predictions is "self-reported, not evaluated"."""

import pytest

from tests.e2e.live import E2E_AUDIT_SAMPLE, script

pytestmark = pytest.mark.mpi

SEED = 5
ENDED = ("FINISHED", "FAILED", "CANCELLED")


def test_a_submission_is_graded_by_its_predictions_not_its_word(idle_master):
    master = idle_master
    liar = master.create_run(
        name="claims 99 %", seed=SEED, task="resnet20-cifar10", test_examples=2000,
        custom_image_command=script("open_division.py") + f" {SEED} random",
    )  # fmt: skip
    done = master.wait_state(liar["id"], ENDED, timeout=120)
    assert done["state"] == "FINISHED", done["reason"]
    graded = done["evaluation"]
    assert graded["status"] == "evaluated" and graded["grades"] == 1
    assert 0.07 < graded["accuracy_after_time"] < 0.13  # random classes of ten
    assert graded["time_to_target"] is None  # it posted 2.0 s; its predictions say never
    (mismatch,) = graded["mismatches"]
    assert mismatch["reported"] == 0.99 and mismatch["graded"] == graded["accuracy_after_time"]
    # Its model (an honest ONNX file) does not predict the random classes it submitted.
    audit = master.wait_audit(liar["id"])
    assert audit["status"] == "mismatch" and audit["examples"] == E2E_AUDIT_SAMPLE, audit
    assert audit["differ"] > 0.75 * E2E_AUDIT_SAMPLE and len(audit["first_rows"]) == 10, audit
    shown = master.cli("show", str(liar["id"])).stdout
    assert "target not reached" in shown and "it reported 99.0%" in shown, shown
    assert f"run {liar['id']} MODEL AUDIT MISMATCH" in shown, shown

    silent = master.create_run(
        name="claims 99 %, no predictions", seed=SEED, task="resnet20-cifar10",
        custom_image_command=script("open_division.py") + f" {SEED} none",
    )  # fmt: skip
    done = master.wait_state(silent["id"], ENDED, timeout=120)
    assert done["state"] == "FINISHED", done["reason"]
    assert done["evaluation"]["status"] == "self-reported, not evaluated"
    assert done["evaluation"]["audit"] == {"status": "no model"}
    report = master.cli("report", str(liar["id"]), str(silent["id"])).stdout
    assert f"* run {silent['id']}: self-reported, not evaluated" in report, report
    assert f"run {liar['id']} MISMATCH at step 10" in report, report
