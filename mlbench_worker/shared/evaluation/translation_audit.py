"""The audit of a translation run's final model (task 4b): does the exported model, decoding
greedily as the task does, write exactly the hypotheses the run posted?

Why: BLEU is graded from the posted lines alone (bleu.py), so a run that holds the
references could post them as its hypotheses and be graded 100. The other tasks' final
models are run on the evaluator's inputs and must give the posted predictions
(model_audit.py); this is the same check for a model that writes sentences.

Why no decoding loop: greedy decoding writes a line iff at every position the model's
highest-scoring next piece is the one written, and after the last piece it ends the
sentence. So the evaluator feeds each sampled row's source and BOS + the posted pieces in
ONE teacher-forced pass and compares every position's arg-max with the next posted piece
(then EOS). Teacher forcing with the posted pieces is also what makes a near-tie harmless:
where the posted piece is within the tolerance of the best, the following positions are
scored after the posted one, as the run's decoder continued after it. A line the model
did not end is accepted only where the task's decoder would have stopped it: at
LENGTH_RATIO x the source's pieces (its EOS included) + LENGTH_EXTRA pieces or more (the
worker caps a batch at its longest source, so a row may run longer than its own cap; never
longer than the test set's longest source allows).

The model contract (docs/checking.rst, "Task 4b: the translation model"): inputs
``source`` int64 N x S (source pieces then EOS, padding after) and ``target_in`` int64
N x T (BOS then pieces, padding after), output ``logits`` float N x T x V, every
dimension but V dynamic, taken by position; the run's SentencePiece model serialized
and base64-encoded in the ONNX metadata under VOCABULARY_KEY. Its ids of padding, BOS
and EOS are the ones used (the task's: 0, 2, 3). The vocabulary only maps: the sources
are the evaluator's own (regenerated from the seed, or read from the checksummed archive),
the hypotheses are the ones the run posted; the vocabulary turns both into the ids the
model takes and cannot change either. A crafted one runs in the audit's bounded child.

numpy, onnxruntime and sentencepiece only (tests/test_worker_rooms.py).
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from typing import Any

import numpy as np

from mlbench_worker.shared.evaluation import model_audit, predictions, test_sets, text_references
from mlbench_worker.shared.evaluation.model_audit import ModelRefused, first_line
from mlbench_worker.shared.evaluation.predictions import Predictions

VOCABULARY_KEY = "mlbench.sentencepiece_model"  # metadata: base64 of the serialized model
# How far a posted piece's logit may be below the best one (times the best's size, at
# least 1) and still count as the greedy choice: onnxruntime's logits differ from torch's
# by about 1e-6 here, and the run decoded in padded batches. tf32 (a GPU's matrix
# products) rounds far more: the image audit's bound, not measured for this model.
TOLERANCE = {"fp32": 1e-4, "tf32": 0.05}
PRECISIONS = tuple(TOLERANCE)
LENGTH_RATIO, LENGTH_EXTRA = 1.5, 10  # the worker's cap on a decoded line (tasks/wmt/train.py)
LOGIT_VALUES = 8_000_000  # logits one run of the model gives at most (32 MiB)
FIRST_ROWS = model_audit.FIRST_ROWS


def vocabulary_of(session: Any) -> Any:
    """The SentencePiece processor carried in a session's metadata; ModelRefused naming
    what is missing or wrong."""
    # Imported here: only a translation audit needs sentencepiece, and the master imports
    # this module's constants without it.
    import sentencepiece as spm

    carried = session.get_modelmeta().custom_metadata_map.get(VOCABULARY_KEY)
    if not carried:
        raise ModelRefused(
            f"the model's metadata has no {VOCABULARY_KEY!r}: a translation model carries "
            "its SentencePiece model (base64) so the evaluator can map sources and posted "
            "pieces to its ids"
        )
    try:
        proto = base64.b64decode(carried, validate=True)
        sp = spm.SentencePieceProcessor(model_proto=proto)
    except (binascii.Error, ValueError, RuntimeError, TypeError) as exc:
        raise ModelRefused(
            f"the model's {VOCABULARY_KEY!r} is not a base64 SentencePiece model: {first_line(exc)}"
        ) from None
    ids = {"padding": sp.pad_id(), "BOS": sp.bos_id(), "EOS": sp.eos_id()}
    if min(ids.values()) < 0 or len(set(ids.values())) < 3:
        raise ModelRefused(
            f"the model's vocabulary needs distinct padding, BOS and EOS ids; it has {ids}"
        )
    return sp


class TranslationModel:
    """A loaded ONNX translation model that keeps the contract (checked when made)."""

    def __init__(self, data: bytes, threads: int = model_audit.THREADS) -> None:
        self.session = session = model_audit.onnx_session(data, threads)
        self.sp = vocabulary_of(session)
        self.vocab = int(self.sp.vocab_size())
        self.pad, self.bos, self.eos = self.sp.pad_id(), self.sp.bos_id(), self.sp.eos_id()
        inputs, outputs = session.get_inputs(), session.get_outputs()
        wanted = "source int64 N x S and target_in int64 N x T"
        if len(inputs) != 2:
            raise ModelRefused(f"the model takes {len(inputs)} inputs; the contract has {wanted}")
        for given, name in zip(inputs, ("source", "target_in"), strict=True):
            dims = list(given.shape or [])
            if given.type != "tensor(int64)" or len(dims) != 2:
                shown = " x ".join(map(str, dims)) or "a scalar"
                raise ModelRefused(
                    f"the model's input {given.name!r} (the contract's {name}) is {given.type} "
                    f"{shown}; the contract has {wanted}"
                )
            fixed = [d for d in dims if isinstance(d, int) and d > 0]
            if fixed:
                raise ModelRefused(
                    f"the model's input {given.name!r} (the contract's {name}) has a fixed "
                    f"dimension ({' x '.join(map(str, dims))}); batch and length must be dynamic"
                )
        self.names = [given.name for given in inputs]
        if not outputs or outputs[0].type not in ("tensor(float)", "tensor(double)"):
            found = outputs[0].type if outputs else "nothing"
            raise ModelRefused(f"the model's output 0 is {found}, not float logits")
        # Three rows of other lengths than the exporter traced, so a frozen shape fails here.
        trial = self.logits(np.full((3, 6), self.eos), np.full((3, 4), self.bos))
        if trial.shape != (3, 4, self.vocab):
            raise ModelRefused(
                f"the model gives logits of shape {' x '.join(map(str, trial.shape))} for 3 "
                f"sources and 3 x 4 target pieces; the contract is N x T x V, V the vocabulary's "
                f"{self.vocab} pieces"
            )

    def logits(self, source: np.ndarray, target_in: np.ndarray) -> np.ndarray:
        """One teacher-forced pass: the model's logits (N x T x V); ModelRefused when it
        fails, or gives NaN or infinite logits."""
        feed = {
            self.names[0]: np.ascontiguousarray(source, dtype=np.int64),
            self.names[1]: np.ascontiguousarray(target_in, dtype=np.int64),
        }
        try:
            out = np.asarray(self.session.run(None, feed)[0])
        except Exception as exc:
            raise ModelRefused(
                f"the model fails on {source.shape[0]} sources of {source.shape[1]} pieces and "
                f"targets of {target_in.shape[1]}: {first_line(exc)}"
            ) from None
        if out.ndim != 3 or out.shape[:2] != target_in.shape:
            raise ModelRefused(
                f"the model gives logits of shape {' x '.join(map(str, out.shape))} for "
                f"targets of {' x '.join(map(str, target_in.shape))}; the contract is N x T x V"
            )
        if not np.isfinite(out).all():
            raise ModelRefused("the model gives NaN or infinite logits")
        return out

    def source_ids(self, sentence: str) -> list[int]:
        """A source sentence as the task encodes it: its pieces, then EOS."""
        return [*self.sp.encode(sentence), self.eos]

    def hypothesis_ids(self, line: str) -> tuple[list[int], str]:
        """A posted line's pieces as ids, and why it cannot be the model's ("" when it can:
        every piece in the vocabulary, none of them padding or EOS)."""
        pieces = line.split(" ") if line else []
        ids = [int(self.sp.piece_to_id(piece)) for piece in pieces]
        for at, (piece, got) in enumerate(zip(pieces, ids, strict=True)):
            if self.sp.id_to_piece(got) != piece:
                return ids, f"piece {at} ({piece[:40]!r}) is not in the model's vocabulary"
            if got in (self.pad, self.eos):
                return ids, f"piece {at} ({piece!r}) is one the decoder never writes"
        return ids, ""


def sources(test_set: test_sets.TestSet) -> list[str]:
    """The source sentences of a translation task's `test_set`, in order, as the evaluator
    holds them: regenerated from the seed, or newstest2017's English side read from the
    checksummed archive (LabelsUnavailable when it cannot be had)."""
    if test_set.dataset == test_sets.SYNTHETIC:
        return text_references.generated_sources(test_set.seed, test_set.size)
    return text_references.newstest2017(test_set.data_dir, member=text_references.SOURCE_MEMBER)[
        : test_set.size
    ]


def _batches(lengths: list[tuple[int, int]], vocab: int) -> list[list[int]]:
    """Positions grouped so that a batch's logits stay within LOGIT_VALUES (similar target
    lengths together; a row alone when it alone is larger)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i][1])
    out: list[list[int]] = []
    current: list[int] = []
    for i in order:
        longest = max([lengths[j][1] for j in current] + [lengths[i][1]])
        if current and (len(current) + 1) * longest * vocab > LOGIT_VALUES:
            out.append(current)
            current = []
        current.append(i)
    if current:
        out.append(current)
    return out


def _padded(rows: list[list[int]], pad: int) -> np.ndarray:
    out = np.full((len(rows), max(len(r) for r in rows)), pad, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def check_rows(
    model: TranslationModel, source_texts: list[str], lines: list[str], tolerance: float
) -> list[tuple[str | None, bool]]:
    """For each row (a source and the posted line): None where greedy decoding by `model`
    writes that line, else why not (naming the position); and whether a posted piece or
    the end was accepted as a near-tie, not the arg-max."""
    src = [model.source_ids(s) for s in source_texts]
    longest_cap = int(max(len(s) for s in src) * LENGTH_RATIO) + LENGTH_EXTRA
    hyp, why = [], []
    for line in lines:
        ids, wrong = model.hypothesis_ids(line)
        if not wrong and len(ids) > longest_cap:
            wrong = f"it has {len(ids)} pieces; the decoder stops every line at {longest_cap}"
        hyp.append(ids)
        why.append(wrong or None)
    verdicts: list[tuple[str | None, bool]] = [(w, False) for w in why]
    todo = [i for i, w in enumerate(why) if w is None]
    lengths = [(len(src[i]), len(hyp[i]) + 1) for i in todo]
    for batch in _batches(lengths, model.vocab):
        rows = [todo[b] for b in batch]
        logits = model.logits(
            _padded([src[i] for i in rows], model.pad),
            _padded([[model.bos, *hyp[i]] for i in rows], model.pad),
        )
        for k, i in enumerate(rows):
            verdicts[i] = _row_verdict(model, logits[k], hyp[i], len(src[i]), tolerance)
    return verdicts


def _row_verdict(
    model: TranslationModel, logits: np.ndarray, ids: list[int], source_len: int, tol: float
) -> tuple[str | None, bool]:
    tied = False
    for t, posted in enumerate(ids):
        row = logits[t]
        best = int(row.argmax())
        if best != posted:
            if row[best] - row[posted] > tol * max(1.0, abs(float(row[best]))):
                return (
                    f"at piece {t} the model's greedy choice is "
                    f"{model.sp.id_to_piece(best)!r}, the run posted "
                    f"{model.sp.id_to_piece(posted)!r}"
                ), tied
            tied = True
    end = logits[len(ids)]
    best = int(end.argmax())
    ends = max(float(end[model.eos]), float(end[model.pad]))
    if best in (model.eos, model.pad):
        return None, tied
    if float(end[best]) - ends <= tol * max(1.0, abs(float(end[best]))):
        return None, True
    if len(ids) >= int(source_len * LENGTH_RATIO) + LENGTH_EXTRA:
        return None, tied  # the decoder's length cap stopped it
    return (
        f"after its {len(ids)} pieces the model goes on with "
        f"{model.sp.id_to_piece(best)!r}; the run's line ends there"
    ), tied


def audit(
    model: TranslationModel,
    test_set: test_sets.TestSet,
    submitted: Predictions,
    *,
    sample: int,
    sample_seed: int,
    precision: str = "fp32",
) -> dict[str, Any]:
    """Check the `submitted` hypotheses (a file already graded on `test_set`) against
    `model`'s greedy decoding on all rows or a sample of `sample` drawn with `sample_seed`:
    the result as the run shows it (docs/checking.rst)."""
    if precision not in TOLERANCE:
        raise ValueError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    lines = submitted.text or [""]
    if len(lines) != test_set.size:
        raise ValueError(f"the predictions hold {len(lines)} lines; the set has {test_set.size}")
    rows, sampled = model_audit.rows_to_audit(test_set.size, sample, sample_seed)
    texts = sources(test_set)
    verdicts = check_rows(
        model, [texts[r] for r in rows], [lines[r] for r in rows], TOLERANCE[precision]
    )
    differ = [(int(r), v) for r, (v, _) in zip(rows, verdicts, strict=True) if v is not None]
    ties = sum(1 for v, tied in verdicts if v is None and tied)
    result: dict[str, Any] = {
        "status": model_audit.MISMATCH if differ else model_audit.MATCHES,
        "examples": int(rows.size),
        "sample": sampled,
        "differ": len(differ),
        "ties": ties,
        "first_rows": [r for r, _ in differ[:FIRST_ROWS]],
        "step": submitted.step,
        "precision": precision,
        "tolerance": TOLERANCE[precision],
        "why": "",
    }
    if differ:
        row, said = differ[0]
        result["why"] = (
            f"the model's greedy decoding does not write the run's hypotheses of step "
            f"{submitted.step} on {len(differ)} of {rows.size} "
            + ("sampled " if sampled else "")
            + f"test sentences; the first, row {row}: {said}"
        )
    return result


def answer(data: bytes, test_set: test_sets.TestSet, request: dict[str, Any]) -> dict[str, Any]:
    """The audit child's answer for a translation model (audit_process.py): {} after a
    "check", {"result": ...} after an "audit"; ModelRefused and the like propagate."""
    model = TranslationModel(data)
    if request["mode"] == "check":
        return {}
    submitted = predictions.read(Path(request["predictions"]))
    return {
        "result": audit(
            model,
            test_set,
            submitted,
            sample=int(request["sample"]),
            sample_seed=int(request["sample_seed"]),
            precision=request["precision"],
        )
    }
