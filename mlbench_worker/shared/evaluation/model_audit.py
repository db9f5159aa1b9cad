"""The ONNX audit: the evaluator runs a run's exported final model on test inputs it owns and
checks that the model gives the predictions the run submitted at the evaluation it names.

Why: the grades (evaluator.py) say how good the submitted predictions are, not that a
trained model made them. A run could submit predictions computed from the labels, or an
open-division command could write whatever it likes. The audit ties a predictions file
to a model anyone can run: the model, fed the test inputs the evaluator regenerates or
reads from checksummed files (test_sets.inputs), must predict what the run submitted.

The model contract (docs/checking.rst, "The model format"): one self-contained ONNX file
(no tensor's data in another file: onnx_external.py); input 0 takes the task's raw test
inputs (task 1a: float32 N x 3 x 32 x 32, pixel values 0..255; task 1b: float32 N x 3 x S
x S, pixel values 0..255, S fixed in the model and one of the crops a run may use, 64 to
512, since the master does not know the run's --crop; task 2: float32 N x features), batch
dimension dynamic; output 0 gives N x classes scores (the predicted class is the highest)
or, for task 2, N or N x 1 scores (the label is +1 where the score is 0 or more, else -1).
A model that does not load, or does not fit the task's inputs and outputs, is refused
(ModelRefused) with a message naming the problem.

A row differs when the model's prediction is not the submitted one, unless the run's
evaluation could have ranked the two classes otherwise: the submitted class's score within
TOLERANCE[precision] (times the top score's size, at least 1) of the highest, or a task 2
score within it of 0. The precision is the evaluation's arithmetic, as the run says it
(fp32; bf16 or fp16 under --amp; tf32 on a GPU): the audit runs float32 on the CPU, and a
reduced precision moves scores by up to a few percent (docs/checking.rst gives the
measurement). No other difference is allowed. Large sets are audited on a sample of
`sample` rows drawn with a seed the master draws when the model is stored
(new_sample_seed), after the predictions it is compared with were fixed, so a run cannot
know which rows will be run; a sample of 2,000 rows finds a model that disagrees on 0.3 %
of rows with probability 1 - 0.997^2000 > 99.7 %. Task 1b's models cost far more a row (a
ResNet-50 at 224 pixels, plus decoding each JPEG), so its sample is smaller
(audit_process.SAMPLE_IMAGENET, which says its cost and what it finds).

numpy and onnxruntime only (CPU, THREADS threads; the inputs of task 1b are decoded with
Pillow, test_sets.inputs), and nothing of any implementation, trainer, model or framework
(tests/test_worker_rooms.py). The master and `mlbench evaluate` run it in a child process
with bounded time and memory (audit_process.py).
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from mlbench_worker.shared import imagenet_rules
from mlbench_worker.shared.evaluation import onnx_external, test_sets
from mlbench_worker.shared.evaluation.predictions import CLASS, LABEL, Predictions

# The score gap within which a row's class may differ, by the evaluation's precision
# (relative to the top score's size, at least 1). fp32: float rounding only. The reduced
# precisions: bf16 under --amp on the CPU moved ResNet-20's scores by up to 4.1 % of the top
# score and needed gaps of up to 1.5 % (docs/checking.rst, "The ONNX audit"); fp16 and
# TF32 keep three more bits of mantissa than bf16, so its tolerance covers them.
TOLERANCE = {"fp32": 1e-6, "tf32": 0.05, "fp16": 0.05, "bf16": 0.05}
PRECISIONS = tuple(TOLERANCE)
THREADS = 1
BATCH = 500
# Input values one run of the model takes at most: 500 rows of task 1a or 2, 10 images of
# task 1b at 224 pixels (a ResNet-50's first convolution alone gives 1.6 GB of activations
# for 500 of them, under an address space capped at 4 GiB: audit_process.MEMORY_MIB).
BATCH_VALUES = BATCH * 3 * 32 * 32
FIRST_ROWS = 10  # differing rows listed in a result
TRIAL_ROWS = 3  # inputs a model is tried on when it is checked
MATCHES, MISMATCH, REFUSED, NO_MODEL, PENDING, NOT_AUDITED = (
    "matches",
    "mismatch",
    "refused",
    "no model",
    "pending",
    "not audited",
)


class ModelRefused(ValueError):
    """A model the evaluator will not audit; the message names the problem."""


@dataclass(frozen=True)
class Contract:
    """What a task's model must take and give: the input's shape after the batch
    dimension, and the number of classes (None: task 2's one score per row). `crops`: task
    1b's, whose S x S images are the model's own (declared fixed in its input, within these
    bounds): `shape` holds the benchmark's until `fitted` to a model."""

    shape: tuple[int, ...]
    classes: int | None
    crops: tuple[int, int] | None = None

    def describe(self) -> str:
        dims = " x ".join(["N", *map(str, self.shape)])
        gives = f"N x {self.classes} scores" if self.classes else "N (or N x 1) scores"
        return f"float32 {dims} in, {gives} out"

    @property
    def crop(self) -> int | None:
        """Task 1b: the images' S (the inputs are made for it); None for other tasks."""
        return self.shape[-1] if self.crops else None

    def rows_per_batch(self) -> int:
        return max(1, min(BATCH, BATCH_VALUES // math.prod(self.shape)))

    def fitted(self, dims: list) -> Contract:
        """The contract for a model whose input 0 is declared `dims`: task 1b's S x S taken
        from it (ModelRefused, naming the problem, unless it is N x 3 x S x S with S fixed
        and within `crops`); other tasks' as it is."""
        if self.crops is None:
            return self
        low, high = self.crops
        wanted = (
            f"task 1b's models take float32 N x 3 x S x S images, S fixed in the model "
            f"(the run's crop: {low} to {high} pixels)"
        )
        side = dims[2] if len(dims) == 4 else None
        if len(dims) != 4 or dims[1] != 3 or not isinstance(side, int) or dims[3] != side:
            shown = " x ".join(map(str, dims)) or "a scalar"
            raise ModelRefused(f"the model's input is {shown}; {wanted}")
        if not low <= side <= high:
            raise ModelRefused(f"the model's input is {side} x {side} pixels; {wanted}")
        return replace(self, shape=(3, side, side))


def contract_of(test_set: test_sets.TestSet) -> Contract:
    """The contract of `test_set`'s task (task 1b's still to be `fitted` to its model)."""
    family = test_sets.task_info(test_set.task).dataset
    if family == "imagenet":
        side = imagenet_rules.CROP
        crops = (imagenet_rules.MIN_CROP, imagenet_rules.MAX_CROP)
        return Contract((3, side, side), test_sets.CLASSES["imagenet"], crops)
    if family == "cifar10":
        return Contract((3, 32, 32), test_sets.CLASSES["cifar10"])
    return Contract((test_set.features,), None)


def _dims(shape: Any) -> list:
    return list(shape) if shape is not None else []


def onnx_session(data: bytes, threads: int = THREADS) -> Any:
    """An onnxruntime session (CPU, `threads` threads) of a self-contained ONNX model; every
    model the evaluator runs is loaded here (the audit's and task 3's, language_model.py).
    ModelRefused for a file that is not ONNX, keeps tensor data in another file, or does not
    load."""
    import onnxruntime as ort

    try:
        outside = onnx_external.external_tensors(data)
    except onnx_external.Broken as exc:
        raise ModelRefused(f"the model is not an ONNX model: {exc}") from None
    except RecursionError:  # groups inside groups (old protobuf), each skipped by recursion
        raise ModelRefused(
            "the model is not an ONNX model: its protobuf groups nest too deeply to read"
        ) from None
    if outside:
        raise ModelRefused(
            f"the model keeps the data of tensor {', '.join(dict.fromkeys(outside))} in "
            "another file; a model is one self-contained ONNX file (external data is "
            "refused wherever it is: initializers, node attributes, subgraphs)"
        )
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    options.add_session_config_entry("session.load_model_format", "ONNX")
    try:
        return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise ModelRefused(
            f"the model is not an ONNX model onnxruntime can load: {first_line(exc)}"
        ) from None


class Model:
    """A loaded ONNX model that fits a task's contract (checked when it is made)."""

    def __init__(self, data: bytes, contract: Contract, threads: int = THREADS) -> None:
        self.contract = contract  # task 1b's: fitted to the model's input once it is read
        self.session = onnx_session(data, threads)
        inputs, outputs = self.session.get_inputs(), self.session.get_outputs()
        if len(inputs) != 1:
            raise ModelRefused(
                f"the model takes {len(inputs)} inputs; the contract has one "
                f"({contract.describe()})"
            )
        self.input = inputs[0].name
        if inputs[0].type != "tensor(float)":
            raise ModelRefused(f"the model's input is {inputs[0].type}, not tensor(float)")
        dims = _dims(inputs[0].shape)
        self.contract = contract = contract.fitted(dims)
        if len(dims) != 1 + len(contract.shape) or any(
            isinstance(d, int) and d != want
            for d, want in zip(dims[1:], contract.shape, strict=False)
        ):
            raise ModelRefused(
                f"the model's input is {' x '.join(map(str, dims)) or 'a scalar'}; the task's "
                f"inputs are {contract.describe()}"
            )
        if isinstance(dims[0], int) and dims[0] > 0:
            raise ModelRefused(
                f"the model's batch dimension is fixed at {dims[0]}; the contract needs it "
                "dynamic (export with a dynamic first axis)"
            )
        if not outputs or outputs[0].type not in ("tensor(float)", "tensor(double)"):
            found = outputs[0].type if outputs else "nothing"
            raise ModelRefused(f"the model's output 0 is {found}, not float scores")
        # Three rows: exporters trace with two, so a graph whose batch size was frozen at
        # export (a Reshape to a fixed shape) fails here, not in the audit.
        trial = self.scores(np.zeros((TRIAL_ROWS, *contract.shape), dtype=np.float32))
        if trial.shape[0] != TRIAL_ROWS:
            raise ModelRefused(
                f"the model gives {trial.shape[0]} rows of scores for {TRIAL_ROWS} inputs; "
                f"the contract is {contract.describe()}"
            )

    def scores(self, x: np.ndarray, batch: int | None = None) -> np.ndarray:
        """The model's scores of inputs `x` (N x classes, or N for task 2), `batch` rows at
        a time (default: the contract's rows_per_batch); ModelRefused when it fails or gives
        scores of another shape."""
        batch = batch or self.contract.rows_per_batch()
        parts = []
        for start in range(0, len(x), batch):
            chunk = np.ascontiguousarray(x[start : start + batch], dtype=np.float32)
            try:
                out = self.session.run(None, {self.input: chunk})[0]
            except Exception as exc:
                raise ModelRefused(
                    f"the model fails on {len(chunk)} of the task's inputs "
                    f"({self.contract.describe()}): {first_line(exc)}"
                ) from None
            parts.append(self._checked(np.asarray(out), len(chunk)))
        return np.concatenate(parts) if parts else np.zeros(0)

    def _checked(self, out: np.ndarray, n: int) -> np.ndarray:
        classes = self.contract.classes
        if classes is None and out.ndim == 2 and out.shape[1] == 1:
            out = out[:, 0]
        fits = out.shape == ((n, classes) if classes else (n,))
        if not fits:
            raise ModelRefused(
                f"the model gives scores of shape {' x '.join(map(str, out.shape))} for {n} "
                f"inputs; the contract is {self.contract.describe()}"
            )
        if not np.isfinite(out).all():
            raise ModelRefused("the model gives NaN or infinite scores")
        return out


def first_line(exc: BaseException) -> str:
    """The first line of an onnxruntime error, cut short: what a refusal quotes of it."""
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


def new_sample_seed() -> int:
    """The seed of an audit's sample: secret until the model is stored, so a run cannot
    know its rows when it writes its predictions (the master records it in the result)."""
    return secrets.randbits(64)


def rows_to_audit(size: int, sample: int, sample_seed: int) -> tuple[np.ndarray, bool]:
    """The positions audited of a set of `size` examples: all of them, or a sample of
    `sample` drawn with `sample_seed` (sorted); and whether it is a sample."""
    if size <= sample:
        return np.arange(size), False
    rng = np.random.default_rng(sample_seed)
    return np.sort(rng.choice(size, sample, replace=False)), True


def compare(
    scores: np.ndarray, submitted: np.ndarray, tolerance: float = TOLERANCE["fp32"]
) -> tuple[np.ndarray, int]:
    """The positions (in `scores`) where the model's prediction is not `submitted`, rows
    within `tolerance` of a tie left out; and how many were left out."""
    if scores.ndim == 1:  # task 2: a score per row, submitted -1/+1
        mine = np.where(scores >= 0, 1, -1)
        tie = np.abs(scores) <= tolerance
    else:
        mine = scores.argmax(axis=1)
        top = scores.max(axis=1)
        theirs = np.take_along_axis(
            scores, np.clip(submitted, 0, scores.shape[1] - 1)[:, None], axis=1
        )[:, 0]
        tie = (submitted >= 0) & (submitted < scores.shape[1])
        tie &= top - theirs <= tolerance * np.maximum(1.0, np.abs(top))
    differ = mine != submitted
    return np.flatnonzero(differ & ~tie), int(np.count_nonzero(differ & tie))


def audit(
    model: Model,
    test_set: test_sets.TestSet,
    submitted: Predictions,
    *,
    sample: int,
    sample_seed: int,
    precision: str = "fp32",
) -> dict[str, Any]:
    """Run `model` on `test_set`'s inputs (all, or a sample of `sample` drawn with
    `sample_seed`) and compare with the `submitted` predictions (a file already graded on
    that set, evaluated in `precision`): the result as the run shows it (docs/checking.rst,
    "The ONNX audit")."""
    name = LABEL if model.contract.classes is None else CLASS
    predicted = np.asarray(submitted.arrays[name]).astype(np.int64)
    rows, sampled = rows_to_audit(test_set.size, sample, sample_seed)
    scores = model.scores(test_sets.inputs(test_set, rows, crop=model.contract.crop))
    differ, ties = compare(scores, predicted[rows], TOLERANCE[precision])
    return {
        "status": MISMATCH if differ.size else MATCHES,
        "examples": int(rows.size),
        "sample": sampled,
        "differ": int(differ.size),
        "ties": ties,
        "first_rows": [int(r) for r in rows[differ[:FIRST_ROWS]]],
        "step": submitted.step,
        "precision": precision,
        "tolerance": TOLERANCE[precision],
        "why": (
            f"the model predicts otherwise than the run's predictions of step "
            f"{submitted.step} on {differ.size} of {rows.size} "
            + ("sampled " if sampled else "")
            + "test examples"
            if differ.size
            else ""
        ),
    }
