"""The evaluator's work on a posted model, in a child process with bounded time and memory.

Why a child process: a posted model is a program that onnxruntime runs. A Loop with a huge
trip count never ends, an Expand to a huge shape allocates until the kernel kills whoever
runs it, and a tensor with external data reads a file of the working directory. In the
master's web process any of these would hang a request or the audit thread, get the web
server killed, or leak its files. In a child, the address space is capped (RLIMIT_AS,
`Limits.memory_mib`), the process is killed after `Limits.seconds` (its start, about half a
second, counts; its CPU time is capped too, RLIMIT_CPU, so a child whose master died does
not loop on), and its working directory is an empty temporary one. It is handed paths (the
model, the predictions), never the bytes, and answers one JSON object on stdout.

The defaults of the limits and of the samples live here, free of numpy and torch, so the
master's settings (MLBENCH_AUDIT_TIMEOUT, MLBENCH_AUDIT_MEMORY_MIB, MLBENCH_AUDIT_SAMPLE,
MLBENCH_AUDIT_SAMPLE_IMAGENET) and `mlbench evaluate` share them.

The child is `python -m mlbench_worker.shared.evaluation.audit_process MEMORY_MIB SECONDS
PARENT_PID` (it ends when that process's thread that started it ends: `_end_with_parent`), the
request on stdin: {"mode": "check" | "audit", "model": path, "test_set": TestSet's fields,
and for an audit "predictions": path, "sample", "sample_seed", "precision"}. The answer:
{"sha256": of the model bytes it ran, and "result" (an audit's, model_audit.audit), or
"refused" (the model: ModelRefused's message, or over a limit), or "not_audited" (why; also
over the time limit where `Limits.over_time` says why that is not the model's fault)}.

A task-3 model (a language model, graded by the perplexity it gives, not by predictions)
is asked for with "run" in place of "test_set": perplexity.grade's record of the run (task,
workers, dataset, seed, config, data_dir), and for an audit "probe_seed". Its audit's answer
is "score" (perplexity.Score's fields) in place of "result"; the comparison with what the
run reported is the master's (mlbench_master/grading/perplexity_audit.py).

A translation model (task 4b) is asked for like an image model, its test set a text one:
translation_audit.py checks that its greedy decoding writes the posted hypotheses.
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import json
import math
import os
import resource
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SAMPLE = 2000  # test examples an audit runs at most (a sample of a larger set)
# Task 1b's (MLBENCH_AUDIT_SAMPLE_IMAGENET): a row costs a ResNet-50 and a JPEG decoded, about
# 0.08 s at 224 pixels on one thread here (docs/checking.rst): 500 rows take ~45 s, 150 s on a
# core three times slower, where 2,000 would pass TIMEOUT_S. It finds a model that disagrees
# on 1 % of the rows with probability 1 - 0.99^500 > 99.3 % (0.5 %: 91.8 %, 0.3 %: 77.7 %).
SAMPLE_IMAGENET = 500
# A check or an audit, child start included; ResNet-20 on 2,000 rows: ~4 s; ResNet-50 on
# task 1b's 500 at 224 pixels: ~42 s.
TIMEOUT_S = 300
# Task 3's grade of a language model over the whole validation stream (MLBENCH_PERPLEXITY_
# TIMEOUT): one thread scores 300 to 700 tokens a second here, WikiText-2's 217,646 tokens
# take 5 to 22 minutes (shared/evaluation/perplexity.py); an hour leaves a slower core room.
PERPLEXITY_TIMEOUT_S = 3600
# The child's address space; checking a 480 MiB model took 1.5 to 2 GiB; task 1b's audit of
# a ResNet-50 at 224 pixels stays under 1 GiB resident.
MEMORY_MIB = 4096
PR_SET_PDEATHSIG = 1  # prctl(2)
# Words onnxruntime and the C++ runtime use when an allocation fails under the cap.
OUT_OF_MEMORY = ("bad_alloc", "bad allocation", "failed to allocate", "out of memory")


@dataclass(frozen=True)
class Limits:
    """How long (seconds) and how much address space (MiB) one check or audit may take."""

    seconds: float = TIMEOUT_S
    memory_mib: int = MEMORY_MIB
    setting: str = "MLBENCH_AUDIT_TIMEOUT"  # where `seconds` comes from, for messages
    # Empty: a model over the time limit is refused. Else it is not audited, and this says
    # why (task 3's grade of a whole stream: the machine's speed as much as the model's).
    over_time: str = ""


class Failed(RuntimeError):
    """The child ended without an answer for a reason that says nothing of the model (a
    bug here); the message says what it printed."""


def run(request: dict[str, Any], limits: Limits) -> dict[str, Any]:
    """The child's answer to `request` (see the module's docstring). Over the time limit, or
    killed (the memory cap is the usual cause), the answer is a refusal saying which limit;
    Failed when the child failed otherwise."""
    root = str(Path(__file__).resolve().parents[3])  # where mlbench_worker is importable
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    with tempfile.TemporaryDirectory(prefix="mlbench-audit-") as empty:
        try:
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    __name__,
                    str(int(limits.memory_mib)),
                    str(limits.seconds),
                    str(os.getpid()),
                ],  # fmt: skip
                input=json.dumps(request),
                capture_output=True,
                text=True,
                cwd=empty,
                env=env,
                timeout=limits.seconds,
            )
        except subprocess.TimeoutExpired:  # killed by subprocess.run
            said = over_time(limits.seconds, limits.setting)
            if limits.over_time:  # a limit the caller does not hold against the model
                return {"not_audited": f"{said}: {limits.over_time}"}
            return {"refused": said}
    lines = done.stdout.strip().splitlines()
    if done.returncode == 0 and lines:
        return json.loads(lines[-1])
    if done.returncode < 0:
        name = signal.Signals(-done.returncode).name
        return {
            "refused": f"{over_memory(limits.memory_mib)} (the model's process ended by {name})"
        }
    said = (done.stderr.strip().splitlines() or ["nothing"])[-1][:300]
    raise Failed(f"the audit process exited with code {done.returncode}: {said}")


def over_time(seconds: float, setting: str = "MLBENCH_AUDIT_TIMEOUT") -> str:
    return f"the model ran over {seconds:g} s ({setting})"


def over_memory(mib: int) -> str:
    return f"the model needed over {mib} MiB (MLBENCH_AUDIT_MEMORY_MIB)"


def _answer(request: dict[str, Any]) -> dict[str, Any]:
    from mlbench_worker.shared.evaluation import model_audit, predictions, test_sets
    from mlbench_worker.shared.evaluation.file_labels import LabelsUnavailable

    data = Path(request["model"]).read_bytes()
    answer: dict[str, Any] = {"sha256": hashlib.sha256(data).hexdigest()}
    if "run" in request:
        return answer | _language_model(data, request)
    try:
        test_set = test_sets.TestSet(**request["test_set"])
        if test_sets.is_text(test_set.task):  # task 4b: the model must write the hypotheses
            from mlbench_worker.shared.evaluation import translation_audit  # needs sentencepiece

            return answer | translation_audit.answer(data, test_set, request)
        model = model_audit.Model(data, model_audit.contract_of(test_set))
        del data
        if request["mode"] == "check":
            return answer
        submitted = predictions.read(Path(request["predictions"]))
        answer["result"] = model_audit.audit(
            model,
            test_set,
            submitted,
            sample=int(request["sample"]),
            sample_seed=int(request["sample_seed"]),
            precision=request["precision"],
        )
    except model_audit.ModelRefused as exc:
        answer["refused"] = str(exc)
    except (LabelsUnavailable, predictions.PredictionsRefused, ValueError) as exc:
        answer["not_audited"] = str(exc)
    return answer


def _language_model(data: bytes, request: dict[str, Any]) -> dict[str, Any]:
    """Task 3's check ("check": the model loads and keeps the contract of the run's family
    and vocabulary) or grade ("audit": perplexity.grade over the stream the run evaluated),
    from the run's record `request["run"]` (perplexity.grade's keywords)."""
    from mlbench_worker.shared.evaluation import language_model, perplexity
    from mlbench_worker.shared.evaluation.file_labels import LabelsUnavailable

    run = request["run"]
    try:
        if request["mode"] == "check":
            family = perplexity.family_of(run["task"])
            language_model.LanguageModel(data, family, int(run["config"]["vocab"]))
            return {}
        score = perplexity.grade(
            data, **run, probe_seed=int(request["probe_seed"]), max_tokens=None
        )
        return {"score": dataclasses.asdict(score)}
    except language_model.ModelRefused as exc:
        return {"refused": str(exc)}
    except (LabelsUnavailable, ValueError, KeyError) as exc:
        return {"not_audited": str(exc)}


def _end_with_parent(parent: int) -> None:
    """Linux: have the kernel kill this child when the thread that started it ends (a master
    restarted in the middle of a grade, which may have an hour to run, leaves none behind);
    a parent already gone by then ends it at once. Elsewhere, RLIMIT_CPU alone bounds it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os._exit(1)


def main() -> None:
    if len(sys.argv) > 3:
        _end_with_parent(int(sys.argv[3]))
    mib, cpu = int(sys.argv[1]), math.ceil(float(sys.argv[2])) + 1
    resource.setrlimit(resource.RLIMIT_AS, (mib << 20, mib << 20))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    try:
        answer = _answer(json.loads(sys.stdin.read()))
    except MemoryError:
        answer = {"refused": over_memory(mib)}
    refused = answer.get("refused", "").lower()
    if any(word in refused for word in OUT_OF_MEMORY):
        answer["refused"] = f"{over_memory(mib)}: {answer['refused']}"
    print(json.dumps(answer), flush=True)


def request_of(test_set: Any, **fields: Any) -> dict[str, Any]:
    """A request's test set as the child rebuilds it: a TestSet's fields, its data folder
    absolute (the child runs elsewhere); None for task 3's, whose `run` field says it."""
    fields = {k: str(v) if isinstance(v, Path) else v for k, v in fields.items()}
    if test_set is None:
        return fields | {"run": _absolute(fields["run"])}
    return {"test_set": _absolute(dataclasses.asdict(test_set)), **fields}


def _absolute(found: dict[str, Any]) -> dict[str, Any]:
    if not found.get("data_dir"):
        return found
    return found | {"data_dir": str(Path(found["data_dir"]).resolve())}


if __name__ == "__main__":
    main()
