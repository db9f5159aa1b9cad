# Over 400 lines: one command re-grades every kind of run (predictions, a translation's BLEU,
# a language model's final model), each compared with the master's grade the same way.
"""`mlbench evaluate RUN`: grade a stored run again, here, from its predictions files.

Why a client command and not a button on the master: it is a second, independent grading.
The files come from the master (GET /api/runs/<id>/predictions/, each checked against the
SHA-256 the master lists), the labels do not: the evaluator in this process regenerates a
generated set's labels from the run's seed, or reads a real set's from the files under
`--data-dir`, after checking their checksums. Each grade is printed beside what the master
stored for that evaluation and what the run reported of itself; the command fails (exit 1)
where this grade and the master's differ, which no honest installation produces.

Where the master holds the run's final model (GET /api/runs/<id>/model/), it is audited
here too (shared/evaluation/model_audit.py, with onnxruntime where it is installed, and
Pillow for task 1b's images, in a child process bounded as the master bounds its own:
audit_process.py, with its default limits): run on the test inputs this process
regenerates or reads (task 1b's at the crop the model's input declares), against the
predictions file of the step the master audited, on the same rows (the master's `examples`
and `sample_seed`) and with the same precision's tolerance. The command fails where the model
predicts otherwise than the run submitted, or where this audit and the master's disagree.

A translation run's (task 4b) hypotheses are scored here with sacrebleu against the
references this process regenerates (or reads from WMT17's checksummed test.tgz under
`--data-dir`), and its BLEU and sacrebleu's signature must both equal the master's.

A task-3 run (a language model) has no predictions: its stored final model is graded here
over the validation stream this process regenerates (or reads from WikiText-2's archive
under `--data-dir`), from the run's summary and with the master's probe seed, as the
master graded it (mlbench_master/grading/perplexity_audit.py); the command fails where this grade is
not the master's or not the perplexity the run reported.
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
from pathlib import Path
from typing import Any

from mlbench_worker.client.cli.formatting import duration, percent, plural, table
from mlbench_worker.client.cli.master import EXIT_OK, EXIT_USAGE, CliError, Master
from mlbench_worker.shared import test_sizes  # plain data
from mlbench_worker.shared.evaluation import graded_name  # the package itself: no numpy

EXIT_DISAGREES = 1
AGREE = 1e-12  # two gradings of one file by the same code: equal, up to float printing
# Two grades of one language model by the same code over the same stream: onnxruntime's
# kernels may sum otherwise on another machine (another CPU's vector width), below the
# run-vs-evaluator tolerance of 1e-5 and well above the 7.5e-8 seen between float32 sums.
AGREE_LOSS = 1e-6


def add_parser(sub: Any) -> None:
    evaluate = sub.add_parser(
        "evaluate",
        help="grade a run's predictions (a language model: its final model) again, here",
    )
    evaluate.add_argument("run", type=int, metavar="RUN")
    evaluate.add_argument(
        "--data-dir",
        default="",
        help="where the real data set's files are (a run on generated data needs none)",
    )


def cmd_evaluate(args: argparse.Namespace, master: Master) -> int:
    if args.data_dir and not Path(args.data_dir).is_dir():  # never ignored: it was asked for
        what = "is not a folder" if Path(args.data_dir).exists() else "does not exist"
        raise CliError(
            f"--data-dir {args.data_dir}: {what}; give the folder that holds the real data "
            "set's files (a run on generated data needs none)",
            EXIT_USAGE,
        )
    try:  # the evaluator needs numpy, which `pip install mlbench` (the client) lacks
        import numpy  # noqa: F401
    except ImportError:
        raise CliError(
            "mlbench evaluate grades with numpy: pip install numpy (or the worker extra)",
            EXIT_USAGE,
        ) from None
    return _evaluate(args, master)


def _evaluate(args: argparse.Namespace, master: Master) -> int:
    import importlib.util

    from mlbench_worker.shared.evaluation import test_sets

    run = master.json("get_run", args.run)
    if test_sets.grades_the_model(run.get("task", "")):
        return _evaluate_language_model(args, master, run)
    text = test_sets.is_text(run.get("task", ""))
    if text and importlib.util.find_spec("sacrebleu") is None:
        raise CliError("grading a translation run needs sacrebleu: pip install sacrebleu")
    info = test_sets.task_info(run["task"])
    metric = info.goals[info.default_goal].metric  # val_accuracy; a translation's val_bleu
    show = (lambda v: f"{float(v):.2f}") if text else percent
    listed = master.call("_submit", "GET", f"runs/{args.run}/predictions/").json()
    files = listed.get("results", listed) if isinstance(listed, dict) else listed
    if not files:
        raise CliError(
            f"run {args.run} has no predictions stored: it is {_status(run)}", EXIT_DISAGREES
        )
    stored_meta = _points(master, args.run, graded_name(metric))
    stored = {step: value for step, (value, _) in stored_meta.items()}
    reported = {step: value for step, (value, _) in _points(master, args.run, metric).items()}
    rows, disagree, evaluators, signatures = [], [], {}, set()
    fetched: dict[int, tuple[Any, Path]] = {}  # step -> (predictions, file), for the audit
    with tempfile.TemporaryDirectory(prefix="mlbench-evaluate-") as folder:
        for entry in sorted(files, key=lambda e: e["step"]):
            predictions, path = _fetch(master, args.run, entry, Path(folder))
            meta = stored_meta.get(predictions.step, (None, {}))[1]
            features = int(meta.get("features") or test_sets.EPSILON_FEATURES)
            grade = _grade(run, predictions, args.data_dir, evaluators, features)
            fetched[predictions.step] = (predictions, path)
            mine = grade.metrics[metric]
            theirs = stored.get(grade.step)
            if (
                theirs is None
                or abs(theirs - mine) > AGREE
                or grade.signature != meta.get("signature", "")
            ):  # a BLEU is the master's only if it is the same BLEU (sacrebleu's signature)
                disagree.append(grade.step)
            rows.append(
                [
                    grade.step, f"{grade.epoch:g}", duration(grade.elapsed), grade.examples,
                    show(mine), show(theirs) if theirs is not None else "not stored",
                    show(reported[grade.step]) if grade.step in reported else "-",
                ]
            )  # fmt: skip
            signatures.add((grade.signature, meta.get("signature", "")))
        headers = ["STEP", "EPOCH", "CLOCK", "EXAMPLES", "GRADED HERE", "MASTER'S GRADE"]
        print(
            f"run {args.run} ({run.get('task')}, seed {run.get('seed')}): "
            f"{plural(len(rows), 'evaluation')}"
        )
        print(table([*headers, "REPORTED"], rows))
        for here, master_said in sorted(signatures - {("", "")}):
            print(f"BLEU here: sacrebleu {here}; the master's: {master_said or 'none stored'}")
        audited = _audit(master, run, fetched, evaluators, args.data_dir, Path(folder))
    if disagree:
        steps = ", ".join(map(str, disagree))
        print(f"DISAGREES with the master's stored grade at step {steps}")
        return EXIT_DISAGREES
    print("every grade equals the master's")
    return EXIT_OK if audited else EXIT_DISAGREES


def _audit(
    master: Master, run: dict, fetched: dict, evaluators: dict, data_dir: str, folder: Path
) -> bool:
    """Audit the run's stored model here as the master did (its step, rows and precision);
    False where it predicts otherwise than the run submitted or this audit's verdict is not
    the master's."""
    import importlib.util

    from mlbench_worker.shared.evaluation import audit_process, model_audit, test_sets

    theirs = (run.get("evaluation") or {}).get("audit") or {}
    response = master.call("_submit", "GET", f"runs/{run['id']}/model/", allow=(404,))
    if response.status_code == 404:
        print("model: none stored, not audited")
        return True
    body = response.content
    if theirs.get("model_sha256") and hashlib.sha256(body).hexdigest() != theirs["model_sha256"]:
        print("model: DIFFERS from the one the master audited (SHA-256); try again")
        return False
    if importlib.util.find_spec("onnxruntime") is None:
        print("model: not audited here (pip install onnxruntime to audit it)")
        return True
    imagenet = test_sets.task_info(run["task"]).dataset == "imagenet"
    if imagenet and importlib.util.find_spec("PIL") is None:
        print("model: not audited here (pip install pillow to decode task 1b's images)")
        return True
    step = theirs.get("step")
    if step not in fetched or "sample_seed" not in theirs or "examples" not in theirs:
        print(f"model: the master's audit names no stored step and sample to repeat: {theirs}")
        return False
    last, path = fetched[step]
    dataset, size, features = next(
        k for k, e in evaluators.items() if e.digest == last.test_set_digest
    )  # the set that file was graded on, here
    where = data_dir if dataset != test_sets.SYNTHETIC else ""
    test_set = test_sets.TestSet(run["task"], dataset, int(run["seed"]), size, where, features)
    model = folder / "model.onnx"
    model.write_bytes(body)
    request = audit_process.request_of(
        test_set,
        mode="audit",
        model=model,
        predictions=path,
        sample=int(theirs["examples"]),
        sample_seed=int(theirs["sample_seed"]),
        precision=theirs.get("precision", "fp32"),
    )
    try:
        answer = audit_process.run(request, audit_process.Limits())
    except audit_process.Failed as exc:
        answer = {"not_audited": str(exc)}
    if "refused" in answer:
        mine = {"status": model_audit.REFUSED, "why": answer["refused"]}
    elif "not_audited" in answer:
        print(f"model: not audited here: {answer['not_audited']}")
        return True
    else:
        mine = answer["result"]
    where = "a sample of " if mine.get("sample") else ""
    # The master's own verdict on that step, also where it shows the audit as no longer
    # covering the run (its predictions replaced or followed by later ones: `why` says).
    verdict = theirs.get("verdict", theirs.get("status", "none"))
    shown = f"{verdict}" + (
        f" (shown: {theirs['status']}: {theirs.get('why')})" if "verdict" in theirs else ""
    )
    print(
        f"model audit here: {mine['status']} (step {step}, {where}{mine.get('examples', 0)} "
        f"examples, {mine.get('differ', 0)} differ{'; ' + mine['why'] if mine.get('why') else ''}"
        f"); the master's: {shown}"
    )
    return mine["status"] == model_audit.MATCHES and verdict in (
        model_audit.MATCHES,
        model_audit.PENDING,
    )


def _evaluate_language_model(args: argparse.Namespace, master: Master, run: dict) -> int:
    """Task 3: grade the run's stored final model here, over the stream this process
    regenerates (or reads under --data-dir), as the master did (perplexity_audit.py): the
    same record of the run, the same probe seed; fails where this grade is not the
    master's, or where the model does not give the perplexity the run reported."""
    import importlib.util

    from mlbench_worker.shared.evaluation import audit_process, perplexity

    theirs = (run.get("evaluation") or {}).get("audit") or {}
    if theirs.get("status") == "pending":
        raise CliError(
            f"the master is still grading run {run['id']}'s model (since {theirs.get('since')}); "
            "run this again once it has ended",
            EXIT_DISAGREES,
        )
    response = master.call("_submit", "GET", f"runs/{run['id']}/model/", allow=(404,))
    if response.status_code == 404:
        raise CliError(
            f"run {run['id']} has no model stored: a language model is graded from its final "
            f"model, which its worker posts after its summary ({_status(run)})",
            EXIT_DISAGREES,
        )
    body = response.content
    if theirs.get("model_sha256") and hashlib.sha256(body).hexdigest() != theirs["model_sha256"]:
        print("model: DIFFERS from the one the master graded (SHA-256); try again")
        return EXIT_DISAGREES
    if importlib.util.find_spec("onnxruntime") is None:
        raise CliError("grading a language model needs onnxruntime: pip install onnxruntime")
    dataset = theirs.get("dataset") or run.get("dataset_used") or "synthetic"
    record = perplexity.run_record(
        run["task"], run.get("summary") or {}, int(run.get("seed") or 0),
        int(run.get("num_workers") or 1), dataset, str(Path(args.data_dir).resolve()),
    )  # fmt: skip
    if record is None or "probe_seed" not in theirs:
        print(f"model: the run's summary or the master's grade record is missing: {theirs}")
        return EXIT_DISAGREES
    with tempfile.TemporaryDirectory(prefix="mlbench-evaluate-") as folder:
        model = Path(folder) / "model.onnx"
        model.write_bytes(body)
        request = audit_process.request_of(
            None, mode="audit", model=model, run=record, probe_seed=int(theirs["probe_seed"])
        )
        limits = audit_process.Limits(
            audit_process.PERPLEXITY_TIMEOUT_S, setting="the grade's default limit"
        )
        try:
            answer = audit_process.run(request, limits)
        except audit_process.Failed as exc:
            answer = {"not_audited": str(exc)}
    if "score" not in answer:
        print(f"model: not graded here: {answer.get('refused') or answer.get('not_audited')}")
        return EXIT_DISAGREES
    mine, master_grade = answer["score"], theirs.get("graded") or {}
    said = theirs.get("reported_perplexity")
    print(f"run {run['id']} ({run['task']}, seed {run.get('seed')}): its final model, step "
          f"{theirs.get('step')}, {mine['tokens']} tokens of {dataset}")  # fmt: skip
    print(
        table(
            ["", "LOSS", "PERPLEXITY", "ACCURACY"],
            [
                ["graded here", f"{mine['loss']:.6f}", f"{mine['perplexity']:.4f}",
                 percent(mine["accuracy"])],
                ["master's grade", f"{master_grade.get('loss', float('nan')):.6f}",
                 f"{master_grade.get('perplexity', float('nan')):.4f}",
                 percent(master_grade["accuracy"]) if "accuracy" in master_grade else "-"],
                ["reported", "-", f"{said:.4f}" if said else "-", "-"],
            ],
        )
    )  # fmt: skip
    if "loss" not in master_grade:  # refused, or not audited: no grade to compare with
        print(
            f"the master has no grade of this model ({theirs.get('status')}: {theirs.get('why')})"
        )
    said_here, code = _judge(mine["loss"], theirs)
    print(said_here)
    return code


def _judge(loss: float, theirs: dict) -> tuple[str, int]:
    """This grade's mean `loss` held against the master's grade record `theirs`: what to
    say and the exit code."""
    from mlbench_worker.shared.evaluation.perplexity import relative_difference

    status, graded, said = (
        theirs.get("status"),
        theirs.get("graded") or {},
        theirs.get("reported_perplexity"),
    )
    if "loss" in graded and abs(graded["loss"] - loss) > AGREE_LOSS * abs(loss):
        return f"DISAGREES with the master's grade ({status})", EXIT_DISAGREES
    if not said:
        return (
            f"the run reported no perplexity at step {theirs.get('step')} to compare with",
            EXIT_DISAGREES,
        )
    tolerance = float(theirs.get("tolerance", 1e-5))
    if relative_difference(loss, said) > tolerance:
        return (
            f"the model does NOT give the perplexity the run reported (tolerance {tolerance:g})",
            EXIT_DISAGREES,
        )
    if "loss" in graded:
        return f"the grade equals the master's and the run's own perplexity ({status})", EXIT_OK
    if status == "not audited":  # it could not: its data, its limit
        return (
            "the model gives the perplexity the run reported; the master did not grade it",
            EXIT_OK,
        )
    return (
        "the model gives the perplexity the run reported; the master's verdict differs",
        EXIT_DISAGREES,
    )


def _status(run: dict) -> str:
    return (run.get("evaluation") or {}).get("status") or "not evaluated yet"


def _points(master: Master, run_id: int, name: str) -> dict[int, tuple[float, dict]]:
    body = master.call(
        "_submit", "GET", f"metrics/{run_id}/",
        params={"metric_type": "run", "metric_filter": name, "details": 1},
    ).json()  # fmt: skip
    out = {}
    for point in body.get(name, []) if isinstance(body, dict) else []:
        step = (point.get("metadata") or {}).get("step")
        if step is not None:
            out[int(step)] = (float(point["value"]), point.get("metadata") or {})
    return out


def _fetch(master: Master, run_id: int, entry: dict, folder: Path) -> tuple[Any, Path]:
    from mlbench_worker.shared.evaluation.predictions import PredictionsRefused, read

    body = master.call("_submit", "GET", f"runs/{run_id}/predictions/{entry['step']}/").content
    if hashlib.sha256(body).hexdigest() != entry.get("sha256"):
        raise CliError(
            f"run {run_id}'s predictions of step {entry['step']} arrived damaged (SHA-256 "
            "differs from the master's listing); try again",
            EXIT_DISAGREES,
        )
    path = folder / f"step-{entry['step']}.npz"
    path.write_bytes(body)
    try:
        return read(path), path
    except PredictionsRefused as exc:
        raise CliError(f"run {run_id}: {exc}", EXIT_DISAGREES) from None


def _grade(run: dict, p: Any, data_dir: str, evaluators: dict, features: int) -> Any:
    """The grade of `p` by an evaluator of the run's test set: the generated set of its seed
    (task 2's with `features`, as the master recorded it), or the real set under `data_dir`,
    whichever the file's digest names (a set is never taken on the run's word: the labels
    are this evaluator's)."""
    from mlbench_worker.shared.evaluation import graders, test_sets
    from mlbench_worker.shared.evaluation.file_labels import LabelsUnavailable
    from mlbench_worker.shared.evaluation.predictions import PredictionsRefused

    size = len(p.text) if p.text is not None else len(next(iter(p.arrays.values())))
    info = test_sets.task_info(run["task"])
    last_error = ""
    for dataset in (test_sets.SYNTHETIC, info.dataset):
        if dataset != test_sets.SYNTHETIC and not data_dir:
            last_error = f"not a generated set; give --data-dir with {info.dataset}'s files"
            continue
        key = (dataset, size, features)
        if key not in evaluators:
            try:
                evaluators[key] = graders.evaluator_of(
                    test_sets.TestSet(
                        run["task"], dataset, int(run["seed"]), size, data_dir, features
                    )
                )
            except (ValueError, LabelsUnavailable) as exc:
                last_error = str(exc)
                continue
        if evaluators[key].digest == p.test_set_digest:
            # The run's test set is its own (test_examples, else the whole set), not the file's.
            expected = run.get("test_examples") or test_sizes.whole(info.dataset, dataset)
            if "test_examples" in run and size != expected:  # older masters: not recorded
                why = f"a predictions file predicts {size} examples; it is graded on {expected}"
                raise CliError(f"run {run['id']}: {why}", EXIT_DISAGREES)
            try:
                return evaluators[key].grade(p)
            except PredictionsRefused as exc:
                raise CliError(f"run {run['id']}: {exc}", EXIT_DISAGREES) from None
    raise CliError(
        f"run {run['id']}'s predictions of step {p.step} are of no test set found here "
        f"({last_error or 'neither the generated set of its seed nor the real one'})",
        EXIT_DISAGREES,
    )
