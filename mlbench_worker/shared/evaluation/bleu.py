"""The evaluator of a translation task: corpus BLEU of a run's hypotheses, by sacrebleu.

A run hands over what its model decoded, as SentencePiece pieces (text_predictions.py);
this module turns them into words by one rule (`detokenise`) and scores them against the
references the evaluator holds itself (text_references.py: regenerated from the seed, or
newstest2017 read from its checksummed archive), never against anything the run sent.
The score is sacrebleu's corpus BLEU with its defaults (13a tokenisation, mixed case,
exponential smoothing, one reference), 0 to 100, the number WMT papers report; its
signature (`SIGNATURE`'s form: "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:...")
is kept with every grade, so a reader knows which BLEU it is and can reproduce it with
`sacrebleu -b` on the same lines.

Why detokenise here and not in the run: a run that detokenised itself could choose a
rule that suits sacrebleu's tokeniser better than another run's; every run's pieces become
text by the same rule, the one the worker's own BLEU is documented to use. Nothing in the
score trusts the run: hypotheses that copy the source, stay empty or repeat a word to get
past the brevity penalty are scored as what they are (BLEU's clipped n-gram precisions do
that; tests/api/test_translation_cheats.py checks it).
"""

from __future__ import annotations

from pathlib import Path

from sacrebleu.metrics import BLEU

from mlbench_worker.shared.evaluation import test_sets
from mlbench_worker.shared.evaluation.evaluator import Grade, refuse_other_fields, refuse_other_set
from mlbench_worker.shared.evaluation.predictions import (
    TEXT,
    Predictions,
    PredictionsRefused,
    digest_of_text,
    read,
)

WORD_START = "\u2581"  # SentencePiece's mark of a piece that starts a word ("▁")
# Hypotheses longer in all than this many times the references are refused, not scored:
# sacrebleu's time and memory grow with the text (14 MB took 13 s of CPU), and a decoder
# that stops at 1.5 x the source's pieces + 10 (the worker's) stays far below it.
MAX_LENGTH_RATIO = 20


def detokenise(pieces: str) -> str:
    """One hypothesis as plain text: its pieces joined, each "▁" a space, runs of whitespace
    one space, none at either end ("▁Das ▁Haus ▁ist ▁klein ." -> "Das Haus ist klein.")."""
    return " ".join(pieces.replace(" ", "").replace(WORD_START, " ").split())


def scorer() -> BLEU:
    """sacrebleu's corpus BLEU as the evaluator grades with it (its defaults)."""
    return BLEU()


def signature() -> str:
    """The signature of the BLEU the evaluator grades with."""
    return str(scorer().get_signature().format())


class BleuEvaluator:
    """Grades the hypotheses of one test set of a translation task (built once a run: the
    references are regenerated or read once)."""

    def __init__(
        self, task: str, references: list[str], described: str = "the run's test set"
    ) -> None:
        info = test_sets.task_info(task)
        if not test_sets.is_text(task):
            raise ValueError(f"task {task!r} is not graded by BLEU")
        self.task = task
        self.metric = info.goals[info.default_goal].metric
        self.references = list(references)
        if not self.references:
            raise ValueError("a translation test set needs at least one reference")
        self.digest = digest_of_text(self.references)
        self.characters = sum(map(len, self.references))
        self.described = described

    @classmethod
    def of(cls, test_set: test_sets.TestSet) -> BleuEvaluator:
        """The evaluator of a run's test set (references from test_sets.references)."""
        return cls(test_set.task, test_sets.references(test_set), test_set.describe())

    def expected_fields(self) -> tuple[str, ...]:
        return (TEXT,)

    def grade(self, predictions: Predictions | str | Path) -> Grade:
        """The grade of one evaluation (a file's path, or what `read` gave): corpus BLEU of
        its detokenised lines, with sacrebleu's signature."""
        p = predictions if isinstance(predictions, Predictions) else read(predictions)
        where = p.source or "the predictions"
        refuse_other_set(where, p.test_set_digest, self.digest, self.described)
        refuse_other_fields(where, self.task, p, self.expected_fields())
        lines = p.text
        assert lines is not None  # read() decodes predicted_text whenever the file holds it
        n = len(self.references)
        if len(lines) != n:
            raise PredictionsRefused(
                f"{where}: {TEXT} has {len(lines)} lines; the test set has {n} sentences "
                "(one line per sentence, in its order)"
            )
        plain = [detokenise(line) for line in lines]
        held, allowed = sum(map(len, plain)), MAX_LENGTH_RATIO * self.characters + 1000
        if held > allowed:
            raise PredictionsRefused(
                f"{where}: {TEXT} holds {held} characters of text, more than {MAX_LENGTH_RATIO} "
                f"times its references' {self.characters} (and 1000): not hypotheses a "
                "decoder writes; refused rather than scored"
            )
        bleu = scorer()
        score = bleu.corpus_score(plain, [self.references])
        return Grade(
            p.step,
            p.epoch,
            p.elapsed,
            n,
            {self.metric: float(score.score)},
            signature=str(bleu.get_signature().format()),
        )
