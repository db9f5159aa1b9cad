"""Task 4b through the whole stack: HTTP -> RQ job -> mpirun with 2 ranks -> the small
Transformer learns the generated corpus, its rank 0 posts each evaluation's hypotheses, and
the master grades them by BLEU. The grade equals a direct sacrebleu call on the same file's
detokenised lines against the references regenerated from the run's seed, it rises above a
floor, the run's own val_bleu agrees with it, and sacrebleu's signature is stored.

Sized as tests/worker/test_wmt_mpirun.py sizes its learning run (4,000 generated pairs, 512
tokens a rank a step, two epochs, 64 test sentences), started as the run's command with the
task named, so the master reads the run as a task-4b run."""

import tempfile
from pathlib import Path

import pytest
import requests
import sacrebleu

from mlbench_worker.shared import translation_corpus
from mlbench_worker.shared.evaluation import predictions
from tests.e2e.test_runs import _assert_no_process_left

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

SEED, TEST = 42, 64
FLOOR = 3.0  # BLEU after two epochs (an untrained model scores about 0): the worker test's
SIGNATURE = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"
COMMAND = (
    "python -m mlbench_worker transformer-wmt17 --model transformer-small --dataset synthetic"
    f" --train-samples 4000 --test-samples {TEST} --batch-size 512 --threads 1"
    f" --log-every 20 --seed {SEED} --target standard --max-epochs 2"
)


def _plain(pieces: str) -> str:
    """Pieces as words, written here from the format's definition (docs/checking.rst)."""
    return " ".join(pieces.replace(" ", "").replace("\u2581", " ").split())


def test_a_translation_run_is_graded_by_bleu_from_its_hypotheses(idle_master):
    master = idle_master
    run = master.create_run(
        name="translation", task="transformer-wmt17", custom_image_command=COMMAND,
        run_all_nodes=True, time_limit=540, test_examples=TEST, seed=SEED,
    )  # fmt: skip
    done = master.wait_state(run["id"], ("FINISHED", "FAILED", "CANCELLED"), timeout=540)
    assert done["state"] == "FINISHED", done["reason"]
    assert done["dataset_used"] == "synthetic"
    evaluation = done["evaluation"]
    assert evaluation["status"] == "evaluated" and evaluation["metric"] == "val_bleu"
    assert evaluation["signature"] == SIGNATURE and evaluation["mismatches"] == []

    metrics = master.get(
        f"/api/metrics/{run['id']}/",
        params={"metric_type": "run", "metric_filter": "evaluated_val_bleu", "details": 1},
    ).json()["evaluated_val_bleu"]
    graded = {p["metadata"]["step"]: p for p in metrics}
    assert len(graded) >= 2
    references = [r for _, r in translation_corpus.generated_pairs(SEED, "test", TEST)]
    files = master.get(f"/api/runs/{run['id']}/predictions/").json()
    assert sorted(f["step"] for f in files) == sorted(graded)
    for listed in files:
        body = requests.get(listed["url"], headers=master.headers, timeout=30).content
        p = _read(body)
        assert p.test_set_digest == predictions.digest_of_text(references)
        direct = sacrebleu.corpus_bleu([_plain(line) for line in p.text], [references]).score
        point = graded[listed["step"]]
        assert point["value"] == pytest.approx(direct, abs=1e-9)
        assert point["metadata"]["signature"] == SIGNATURE
        assert point["metadata"]["examples"] == TEST
    last = graded[max(graded)]["value"]
    assert last > FLOOR and last > graded[min(graded)]["value"]
    assert evaluation["accuracy_after_time"] == pytest.approx(last)
    _assert_no_process_left(master, run["id"])


def _read(body: bytes) -> predictions.Predictions:
    """The file as the format's reader reads it (it takes a path)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "p.npz"
        path.write_bytes(body)
        return predictions.read(path)
