"""What the universal evaluator costs, measured side by side in one run, for each task.

For each task's full canonical test set size (generated sets, so nothing is downloaded):
1. the evaluator's set-up once per run: regenerating the test labels from the seed;
2. its cost per evaluation: reading one predictions file (as the master's intake does) and
   grading it (top-1, top-5 for task 1b, the -1/+1 labels for task 2);
3. beside it, what the evaluation itself costs the run: the reference model predicting the
   same number of test examples on one CPU thread (for ResNet-50, 256 images timed and
   scaled: a full pass takes many minutes), so the evaluator's share of an evaluation is
   read from one table.

A second table, the ONNX audit of a run's final model, for each task: the worker's export
once at the end of the run (torch's exporter, behind the normalisation), then the master's
side: the contract check (loading the model and running it on three inputs), the test
inputs of the audited sample regenerated from the seed (task 1b: its JPEG files made again
and decoded, resized and cropped by the evaluator), and onnxruntime on one thread over the
sample (MLBENCH_AUDIT_SAMPLE, 2,000 of the set; task 1b's MLBENCH_AUDIT_SAMPLE_IMAGENET, at
the benchmark's 224 pixels and at a smoke test's 64), against the reference model
predicting the same rows in torch. Measured in this
process; the master runs the check and the audit each in a child process
(audit_process.py), whose start adds about half a second to each.

The worker's side (gathering, writing and posting predictions against a loop without it) is
measured by the worker's own predictions code path; this file measures the grading.
Nothing is asserted; the target (a grade costing well under 1 % of an evaluation) is
printed next to the measurements.
Usage: python tests/benchmarks/bench_evaluator.py [--quick] [--audit]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "benchmarks"))

import numpy as np  # noqa: E402
from common import machine, ratio, write_results  # noqa: E402

from mlbench_worker.shared.evaluation import predictions, test_sets  # noqa: E402
from mlbench_worker.shared.evaluation.evaluator import Evaluator  # noqa: E402

# task -> (test examples, classes or None for -1/+1, model to time, input shape, sample)
TASKS = {
    "resnet20-cifar10": (10_000, 10, "resnet20", (3, 32, 32), 10_000),
    "resnet50-imagenet": (50_000, 1000, "resnet50", (3, 224, 224), 256),
    "logreg-epsilon": (100_000, None, "linear", (2000,), 100_000),
}


def _best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def _predictions(task: str, evaluator: Evaluator, folder: Path) -> Path:
    """A file of mostly right predictions (90 %), as a trained model would write."""
    rng = np.random.default_rng(0)
    labels = evaluator.labels
    wrong = rng.random(labels.size) < 0.1
    if evaluator.classes is None:
        return predictions.write(
            folder, test_set_digest=evaluator.digest, step=1, epoch=1.0, elapsed=1.0,
            predicted_label=np.where(wrong, -labels, labels),
        )  # fmt: skip
    top1 = np.where(wrong, (labels + 1) % evaluator.classes, labels)
    fields = {"predicted_class": top1}
    if evaluator.top5:
        fields["predicted_top5"] = (top1[:, None] + np.arange(5)) % evaluator.classes
    return predictions.write(
        folder, test_set_digest=evaluator.digest, step=1, epoch=1.0, elapsed=1.0, **fields
    )


def _model_seconds(name: str, shape: tuple, sample: int, examples: int, batch: int) -> float:
    """Seconds the reference model takes to predict `examples` inputs (timed on `sample`)."""
    import torch

    from mlbench_worker.models import build_imagenet_model, build_model

    torch.set_num_threads(1)
    if name == "linear":
        model = torch.nn.Linear(shape[0], 1)
    elif name == "resnet50":
        model = build_imagenet_model(name)
    else:
        model = build_model(name)
    model.eval()
    x = torch.randn(min(batch, sample), *shape)
    batches = -(-sample // len(x))

    def run() -> None:
        with torch.no_grad():
            for _ in range(batches):
                model(x).argmax(dim=1) if name != "linear" else model(x).sign()

    return _best(run, 1 if name == "resnet50" else 2) * examples / (batches * len(x))


AUDITED = {  # row name -> (task, test examples, model, input shape); smaller models first
    "resnet20-cifar10": ("resnet20-cifar10", 10_000, "resnet20", (3, 32, 32)),
    "logreg-epsilon": ("logreg-epsilon", 100_000, "linear", (2000,)),
    "resnet50-imagenet, 64 px": ("resnet50-imagenet", 50_000, "resnet50", (3, 64, 64)),
    "resnet50-imagenet": ("resnet50-imagenet", 50_000, "resnet50", (3, 224, 224)),
}


def _audit_row(task: str, size: int, name: str, shape: tuple, quick: bool) -> tuple[list, dict]:
    """The audit's costs for one task (seconds), and the reference model's on the same rows."""
    import torch

    from mlbench_worker.models import build_imagenet_model, build_model
    from mlbench_worker.shared.evaluation import audit_process, model_audit
    from mlbench_worker.tasks.epsilon.glm import LinearModel
    from mlbench_worker.tasks.imagenet import IMAGENET_MEAN, IMAGENET_STD
    from mlbench_worker.training.torch_export import RawInputs, onnx_bytes

    torch.set_num_threads(1)
    torch.manual_seed(0)
    imagenet = name == "resnet50"
    if name == "linear":
        module = LinearModel(shape[0]).export_module()  # what the worker exports
    elif imagenet:  # the run's normalisation, as pipeline.ImageBatches' `normalize`
        std, mean = torch.tensor(IMAGENET_STD), torch.tensor(IMAGENET_MEAN)
        module = RawInputs(build_imagenet_model(name), 1 / (255 * std), -mean / std)
    else:
        scale, shift = torch.full((3,), 1 / (255 * 0.25)), torch.full((3,), -2.0)
        module = RawInputs(build_model(name), scale, shift)
    module.eval()
    if imagenet:
        sample = 16 if quick else audit_process.SAMPLE_IMAGENET
    else:
        sample = 256 if quick else audit_process.SAMPLE
    test_set = test_sets.TestSet(task, test_sets.SYNTHETIC, seed=42, size=size)
    start = time.perf_counter()
    data = onnx_bytes(module, torch.zeros(2, *shape))
    export = time.perf_counter() - start
    contract = model_audit.contract_of(test_set)
    start = time.perf_counter()
    model = model_audit.Model(data, contract)
    check = time.perf_counter() - start
    rows, _ = model_audit.rows_to_audit(size, sample, 42)
    start = time.perf_counter()
    inputs = test_sets.inputs(test_set, rows, crop=model.contract.crop)
    regenerate = time.perf_counter() - start
    run = _best(lambda: model.scores(inputs), 1 if quick or imagenet else 2)
    child, verdict, peak = _child_audit(test_set, data, model.scores(inputs), rows, sample)
    x = torch.from_numpy(inputs.astype(np.float32))
    batch = model.contract.rows_per_batch()

    def in_torch() -> None:
        with torch.no_grad():
            for start in range(0, len(x), batch):
                module(x[start : start + batch])

    torch_s = _best(in_torch, 1 if quick or imagenet else 2)
    total = check + regenerate + run
    size_shown = f"{len(data) / 2**20:.1f} MiB" if imagenet else f"{len(data) / 1024:.0f} KiB"
    row = [
        task, f"{rows.size:,} of {size:,}", f"{export:.2f}", size_shown,
        f"{check:.2f}", f"{regenerate:.2f}", f"{run:.2f}", f"{total:.2f}",
        f"{child:.2f} ({verdict})", f"{peak / 2**20:.2f} GiB", f"{torch_s:.2f}",
    ]  # fmt: skip
    return row, {
        "examples": int(rows.size), "export_s": export, "model_bytes": len(data), "check_s": check,
        "inputs_s": regenerate, "onnxruntime_s": run, "audit_s": total, "child_audit_s": child,
        "child_verdict": verdict, "child_peak_rss_kib": peak, "torch_same_rows_s": torch_s,
    }  # fmt: skip


def _child_audit(test_set, data: bytes, scores, rows, sample: int) -> tuple[float, str, int]:
    """The audit as the master runs it (a child process under the default limits), timed,
    against a predictions file holding the model's classes on the sampled rows; its verdict,
    and the largest resident set of the children so far (KiB: the rows go from the smaller
    models to the larger, so it is this one's)."""
    import resource

    from mlbench_worker.shared.evaluation import audit_process

    labels = test_sets.labels(test_set)
    submitted = np.zeros(labels.size, dtype=np.int64)
    if scores.ndim == 1:
        submitted[:] = 1
        submitted[rows] = np.where(scores >= 0, 1, -1)
        fields = {"predicted_label": submitted}
    else:
        submitted[rows] = scores.argmax(axis=1)
        fields = {"predicted_class": submitted}
    with tempfile.TemporaryDirectory() as tmp:
        path = predictions.write(
            Path(tmp), test_set_digest=predictions.digest_of(labels), step=1, epoch=1.0,
            elapsed=1.0, **fields,
        )  # fmt: skip
        (Path(tmp) / "model.onnx").write_bytes(data)
        request = audit_process.request_of(
            test_set, mode="audit", model=Path(tmp) / "model.onnx", predictions=path,
            sample=sample, sample_seed=42, precision="fp32",
        )  # fmt: skip
        start = time.perf_counter()
        answer = audit_process.run(request, audit_process.Limits())
        seconds = time.perf_counter() - start
    found = answer.get("result", {}).get("status") or answer.get("refused") or str(answer)
    return seconds, found, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss


def audit_table(quick: bool) -> None:
    rows, data = [], {"machine": machine(), "tasks": {}}
    for label, (task, size, name, shape) in AUDITED.items():
        row, found = _audit_row(task, size, name, shape, quick)
        rows.append([label, *row[1:]])
        data["tasks"][label] = found
    headers = [
        "TASK", "AUDITED", "EXPORT S (WORKER)", "MODEL", "CHECK S", "INPUTS S",
        "ONNXRUNTIME S", "AUDIT S (MASTER)", "IN ITS CHILD S", "CHILD PEAK RSS",
        "TORCH, SAME ROWS S",
    ]  # fmt: skip
    write_results(
        "audit",
        "The ONNX audit of a run's final model: the worker's export once, the master's audit "
        "in the background (one thread)",
        headers,
        rows,
        data,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer repeats, small samples")
    parser.add_argument("--audit", action="store_true", help="the audit's table only")
    args = parser.parse_args()
    if args.audit:
        audit_table(args.quick)
        return
    repeats = 3 if args.quick else 10
    rows, data = [], {"machine": machine(), "tasks": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for task, (size, _, model, shape, sample) in TASKS.items():
            dataset = test_sets.SYNTHETIC
            test_set = test_sets.TestSet(task, dataset, seed=42, size=size)
            setup = _best(lambda ts=test_set: Evaluator.of(ts), 1 if args.quick else 3)
            evaluator = Evaluator.of(test_set)
            path = _predictions(task, evaluator, Path(tmp) / task)
            read = _best(lambda p=path: predictions.read(p), repeats)
            grade = _best(lambda p=path, e=evaluator: e.grade(p), repeats)
            grade_only = grade - read
            if args.quick:
                sample = min(sample, 512 if model != "resnet50" else 32)
            predict = _model_seconds(model, shape, sample, size, 64 if model != "linear" else 4096)
            share = grade / (grade + predict)
            metric = evaluator.grade(path).metrics
            rows.append(
                [
                    task, f"{size:,}", f"{setup * 1000:.1f}", f"{read * 1000:.2f}",
                    f"{grade_only * 1000:.2f}", f"{predict:.2f}", f"{100 * share:.3f} %",
                    f"{path.stat().st_size / 1024:.0f} KiB",
                    " ".join(f"{k}={v:.3f}" for k, v in metric.items()),
                ]
            )  # fmt: skip
            data["tasks"][task] = {
                "examples": size, "setup_s": setup, "read_s": read, "grade_s": grade_only,
                "model_predict_s": predict, "model_sample": sample, "grader_share": share,
                "file_bytes": path.stat().st_size, "metrics": metric,
            }  # fmt: skip
    headers = [
        "TASK", "EXAMPLES", "LABELS MS (ONCE)", "READ MS", "GRADE MS", "MODEL PREDICTS S",
        "GRADER SHARE", "FILE", "GRADE",
    ]  # fmt: skip
    write_results(
        "evaluator",
        "The evaluator's cost per evaluation against the evaluation itself (target: < 1 %)",
        headers,
        rows,
        data,
        ratios=[
            ratio(
                f"{task}: reading and grading a predictions file / that plus the model "
                "predicting the same examples (1 thread)",
                t["grader_share"],
                "<= 0.01",
            )
            for task, t in data["tasks"].items()
        ],  # fmt: skip
    )
    audit_table(args.quick)


if __name__ == "__main__":
    main()
