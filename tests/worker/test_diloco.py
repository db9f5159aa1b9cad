"""DiLoCo (mlbench_worker/algorithms/diloco.py, Douillard et al. 2023) against its equations.

- one process: the outer step on known numbers is the paper's Nesterov step, written out
  here (v <- mu v + Delta; theta <- theta - lr (Delta + mu v)), and torch's SGD(nesterov)
  agrees; heavy-ball and the period are obeyed; evaluation sees the outer model;
- the module is an outside algorithm: it imports nothing of mlbench but the public
  interface, declares NAME, API, OPTIONS and one class, and the catalogue's options are its;
- on 2 real ranks through the real Trainer (this file is also the ranks' script, `python
  test_diloco.py MODE`; rank 0 prints RESULT): replicas identical right after each outer
  step and different between, the outer step equal to the formula from the gathered inner
  models, bytes only on outer steps; with H = 1, outer lr 1 and momentum 0 it is local SGD
  averaging after every step (synchronous model averaging);
- light targets on 2 ranks: task 2's with the worker itself, and task 1a's generated set with
  the conv-net stand-in of test_algorithms_short.py, each with at least H times fewer bytes
  per step than the all-reduce, from the harness's comm_bytes.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import sys
import time
from pathlib import Path

import pytest
import torch

THIS = Path(__file__).resolve()
MODULE = THIS.parents[2] / "mlbench_worker" / "algorithms" / "diloco.py"
PUBLIC = "mlbench_worker.algorithms.public"
DEFAULTS = {"period": 8, "outer_lr": 0.7, "outer_momentum": 0.9, "nesterov": "yes"}


# --- the module as an outside algorithm ---------------------------------------------------------
def test_the_module_imports_nothing_of_mlbench_but_the_public_interface():
    tree = ast.parse(MODULE.read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
    ours = {m for m in imported if m.split(".")[0].startswith("mlbench")}
    assert ours == {PUBLIC}, ours
    assert imported - ours <= {"__future__", "contextlib", "collections.abc", "typing", "torch"}


def test_the_module_declares_the_outside_contract():
    tree = ast.parse(MODULE.read_text())
    assigned = {
        t.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    assert ast.literal_eval(assigned["NAME"]) == "diloco"
    assert ast.literal_eval(assigned["API"]) == 1
    options = assigned["OPTIONS"]
    assert isinstance(options, ast.Tuple) and options.elts
    for call in options.elts:  # Option(...) with literal arguments only
        assert isinstance(call, ast.Call) and call.func.id == "Option"
        for arg in [*call.args, *(k.value for k in call.keywords)]:
            ast.literal_eval(arg)
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    assert len(classes) == 1 and [b.id for b in classes[0].bases] == ["Algorithm"]
    assert "finish" in {f.name for f in classes[0].body if isinstance(f, ast.FunctionDef)}


def test_the_module_loads_as_an_outside_algorithm_would(tmp_path):
    """Under another NAME (the built-in's is taken), the registry's path for an outside file
    reads its declaration without running it, imports it and finds its one class."""
    from mlbench_worker.algorithms import registry
    from mlbench_worker.shared.algorithm_catalogue import ALGORITHMS

    copy = tmp_path / "diloco_outside.py"
    copy.write_text(MODULE.read_text().replace('NAME = "diloco"', 'NAME = "diloco-outside"'))
    loaded = registry.load(str(copy))
    assert not loaded.builtin and loaded.cls.__name__ == "DiLoCo"
    assert loaded.declaration.options == ALGORITHMS["diloco"].options
    built = registry.load("diloco")  # the built-in: this module, by its name
    assert built.builtin and built.module.__file__ == str(MODULE)


def test_the_catalogue_states_the_modules_options():
    from mlbench_worker.algorithms import diloco
    from mlbench_worker.shared.algorithm_catalogue import ALGORITHMS

    listed = ALGORITHMS["diloco"]
    assert [dataclasses.astuple(o) for o in listed.options] == [
        dataclasses.astuple(o) for o in diloco.OPTIONS
    ]
    assert listed.defaults() == DEFAULTS and not listed.centralized
    assert "500" in listed.recipe and "0.7" in listed.recipe and "0.9" in listed.recipe


# --- one process: the outer step on known numbers -----------------------------------------------
def _one_rank(options: dict):  # noqa: ANN202 - (algorithm, model)
    from mlbench_worker.algorithms import make
    from mlbench_worker.algorithms.interface import Parts
    from mlbench_worker.training.comm import Communicator, FlatGradients

    model = torch.nn.Linear(3, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, 2.0, -1.0]]))
    parts = Parts(model, FlatGradients(list(model.parameters()), 5), Communicator("mpi"), 0)
    return make("diloco", parts, {**DEFAULTS, **options}), model


def _set(model: torch.nn.Module, values: list[float]) -> None:
    with torch.no_grad():
        model.weight.copy_(torch.tensor([values]))


def _values(model: torch.nn.Module) -> list[float]:
    return model.weight.detach().reshape(-1).tolist()


def test_the_outer_step_on_known_numbers_is_the_papers_nesterov_step():
    algorithm, model = _one_rank({"period": 2})
    _set(model, [0.5, 2.5, -1.0])  # inner steps moved the model
    algorithm.after_step(1)  # not an outer step: nothing happens
    assert _values(model) == [0.5, 2.5, -1.0]
    algorithm.after_step(2)
    # Delta = (1, 2, -1) - (0.5, 2.5, -1) = (0.5, -0.5, 0); v = Delta;
    # theta = theta - 0.7 (Delta + 0.9 v) = (1 - 0.665, 2 + 0.665, -1).
    assert _values(model) == pytest.approx([0.335, 2.665, -1.0], abs=1e-6)
    _set(model, [0.235, 2.665, -0.8])
    algorithm.after_step(4)
    # Delta = (0.1, 0, -0.2); v = 0.9 (0.5, -0.5, 0) + Delta = (0.55, -0.45, -0.2);
    # theta = (0.335, 2.665, -1) - 0.7 ((0.1, 0, -0.2) + 0.9 v) = (-0.0815, 2.9485, -0.734).
    assert _values(model) == pytest.approx([-0.0815, 2.9485, -0.734], abs=1e-6)
    assert algorithm.comm_bytes == 0  # one rank sends nothing, but steps


def test_torch_sgd_with_nesterov_takes_the_same_outer_steps():
    algorithm, model = _one_rank({"period": 1, "outer_lr": 0.3, "outer_momentum": 0.8})
    outer = torch.nn.Parameter(torch.tensor([1.0, 2.0, -1.0]))
    sgd = torch.optim.SGD([outer], lr=0.3, momentum=0.8, nesterov=True)
    generator = torch.Generator().manual_seed(4)
    for step in range(1, 6):
        inner = outer.detach() + torch.randn(3, generator=generator)
        _set(model, inner.tolist())
        algorithm.after_step(step)
        outer.grad = outer.detach() - inner  # the pseudo-gradient
        sgd.step()
        assert _values(model) == pytest.approx(outer.tolist(), abs=1e-5), step


def test_heavy_ball_momentum_steps_by_the_velocity_alone():
    algorithm, model = _one_rank({"period": 1, "nesterov": "no"})
    _set(model, [0.5, 2.5, -1.0])
    algorithm.after_step(1)  # v = (0.5, -0.5, 0); theta = theta - 0.7 v
    assert _values(model) == pytest.approx([0.65, 2.35, -1.0], abs=1e-6)
    _set(model, [0.55, 2.35, -1.0])
    algorithm.after_step(2)  # Delta = (0.1, 0, 0); v = (0.55, -0.45, 0)
    assert _values(model) == pytest.approx([0.65 - 0.385, 2.35 + 0.315, -1.0], abs=1e-6)


def test_evaluation_sees_the_outer_model_and_training_gets_its_own_back():
    algorithm, model = _one_rank({"period": 4})
    _set(model, [0.0, 0.0, 0.0])  # inner steps, before any outer step
    with algorithm.evaluation():
        assert _values(model) == [1.0, 2.0, -1.0]  # theta, the initial model
    assert _values(model) == [0.0, 0.0, 0.0]


# --- 2 ranks through the Trainer ----------------------------------------------------------------
@pytest.mark.mpi
def test_replicas_meet_at_each_outer_step_and_h1_is_model_averaging():
    from .helpers import mpi_result, mpirun

    r = mpi_result(mpirun(2, [str(THIS), "steps"], timeout=300))
    # period 3 over 7 steps: identical right after steps 3 and 6 only.
    assert r["identical"] == [False, False, True, False, False, True, False]
    assert r["bytes"] == [0, 0, r["model_bytes"], 0, 0, r["model_bytes"], 0]
    assert r["model_bytes"] == 4 * r["parameters"]  # parameters only, no buffers
    assert r["formula_error"] < 1e-6 and r["moved"] > 1e-3, r  # the paper's step, not a no-op
    assert r["evaluated_outer"] and r["buffers_averaged"] and r["restored"]
    assert r["h1_max_difference"] < 1e-5, r  # H = 1, lr 1, momentum 0: local SGD, period 1
    assert r["h1_drift"] > 1e-3, r  # the models did train


TASK2 = ["-m", "mlbench_worker", "logreg-epsilon", "--dataset", "synthetic", "--target",
         "light", "--threads", "1", "--train-samples", "4000", "--test-samples", "1000",
         "--log-every", "8"]  # fmt: skip


@pytest.mark.mpi
@pytest.mark.parametrize("outside", [False, True])
def test_diloco_reaches_task_2s_light_target_with_h_times_fewer_bytes(tmp_path, outside):
    """As the built-in, and as an outside file (a copy under another NAME), whose bytes are
    the wire's measured count with nothing left uncounted but the scalar slots."""
    from .helpers import metrics_file, mpirun

    out, name, algorithm = tmp_path / "m.jsonl", "diloco", "diloco"
    if outside:
        name, copy = "diloco-file", tmp_path / "diloco_file.py"
        copy.write_text(MODULE.read_text().replace('NAME = "diloco"', f'NAME = "{name}"'))
        algorithm = str(copy)
    proc = mpirun(2, [*TASK2, "--metrics-file", str(out), "--algorithm", algorithm], timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary, _ = metrics_file(out)
    assert summary["reached"], summary
    if not outside:  # (an outside file's summary names its path and records no options)
        assert summary["algorithm"] == name and summary["algorithm_options"] == DEFAULTS
    full = (2000 + 1) * 4  # allreduce: one fp32 all-reduce of the gradient a step
    steps = summary["epochs"] * 16  # 2000 rows per rank, batch 128
    per_step = summary["comm_bytes_per_step"]
    assert per_step == pytest.approx(full * (steps // 8) / steps)
    assert per_step * DEFAULTS["period"] <= full
    # The run stops at the evaluation that reached the target: every outer step before it.
    assert summary["comm_bytes_to_target"] == full * (steps // 8)
    assert f"algorithm {name}" in proc.stdout and f"({name}: outer Nesterov step" in proc.stdout


@pytest.mark.mpi
def test_diloco_reaches_task_1as_light_target_on_the_generated_set():
    from .helpers import mpi_result, mpirun

    r = mpi_result(mpirun(2, [str(THIS), "target"], timeout=600))
    for name in ("allreduce", "diloco"):
        assert r[name]["reached"] and r[name]["accuracy"] >= 0.70, r
    per_step = {n: r[n]["bytes"] / r[n]["steps"] for n in ("allreduce", "diloco")}
    assert per_step["diloco"] > 0  # it did communicate
    assert per_step["diloco"] * DEFAULTS["period"] <= per_step["allreduce"], per_step


# --- the ranks' side ----------------------------------------------------------------------------
def _trainer(comm, name: str, options: dict, images: int, batch: int, lr: float, model):  # noqa: ANN001
    from mlbench_worker.data.loader import Batches, channel_stats
    from mlbench_worker.shared.algorithm_catalogue import check
    from mlbench_worker.shared.catalogue import get
    from mlbench_worker.tasks.cifar10.synthetic import generate
    from mlbench_worker.training.comm import broadcast_model
    from mlbench_worker.training.metric_sink import Reporter
    from mlbench_worker.training.trainer import Goal, Schedule, Trainer

    data = generate(7, images, 256)
    mean, std = channel_stats(data.train_x)
    broadcast_model(model, comm)
    light = get("resnet20-cifar10").goals["light"].value
    trainer = Trainer(
        model, torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=1e-4),
        Schedule(lr, lr, 0, (), 1.0), Goal("light", light, 8), comm,
        Batches(data.train_x, data.train_y, batch, mean, std),
        Batches(data.test_x, data.test_y, 64, mean, std, augment=False), Reporter(),
        seed=7, device=torch.device("cpu"), print_fn=lambda _m: None,
    )  # fmt: skip
    values, problems = check(name, options, comm.size)
    assert not problems, problems
    trainer.set_algorithm(name, values)
    return trainer


def _net(seed: int) -> torch.nn.Module:
    """test_algorithms_short.py's stand-in for ResNet-20 (batch norm, a 4x4 map)."""
    torch.manual_seed(seed)
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(256, 10),
    )  # fmt: skip


def _params(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _buffers(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([b.reshape(-1) for b in model.buffers() if b.is_floating_point()])


def steps(comm) -> dict:  # noqa: ANN001
    """7 steps of period 3 (identity, bytes, the outer step's formula, evaluation), then
    H = 1, lr 1, momentum 0 beside local SGD of period 1 from the same start."""
    options = {"period": 3, "outer_lr": 0.7, "outer_momentum": 0.9}
    trainer = _trainer(comm, "diloco", options, 8 * 7 * comm.size, 8, 0.05, _net(3))
    exchange, model = trainer.allreduce, trainer.model
    original = exchange.after_step
    out: dict = {"identical": [], "bytes": [], "formula_error": 0.0, "moved": 0.0}
    theta, velocity = _params(model).clone(), torch.zeros_like(_params(model))

    def hooked(step: int) -> None:
        nonlocal theta, velocity
        inner = torch.stack(comm.allgather_object(_params(model)))  # before the outer step
        original(step)
        now = _params(model)
        out["identical"].append(all(torch.equal(x, now) for x in comm.allgather_object(now)))
        out["bytes"].append(exchange.comm_bytes)
        if step % 3 == 0:  # the paper's outer step, from the gathered inner models
            delta = theta - inner.mean(0)
            velocity = 0.9 * velocity + delta
            theta = theta - 0.7 * (delta + 0.9 * velocity)
            out["formula_error"] = max(out["formula_error"], float((now - theta).abs().max()))
            out["moved"] = max(out["moved"], float((now - inner.mean(0)).abs().max()))

    exchange.after_step = hooked
    trainer.clock_start = time.perf_counter()
    trainer.train_one_epoch(0)
    out["parameters"] = _params(model).numel()
    out["model_bytes"] = 4 * out["parameters"]
    # Evaluation: theta (as of step 6) with the ranks' batch-norm statistics averaged.
    own, own_buffers = _params(model).clone(), _buffers(model).clone()
    with exchange.evaluation():
        out["evaluated_outer"] = bool(torch.allclose(_params(model), theta, atol=1e-6))
        mean = torch.stack(comm.allgather_object(own_buffers)).mean(0)
        out["buffers_averaged"] = bool(torch.allclose(_buffers(model), mean, atol=1e-6))
    out["restored"] = torch.equal(_params(model), own) and torch.equal(_buffers(model), own_buffers)

    finals = {}
    h1 = {"period": 1, "outer_lr": 1.0, "outer_momentum": 0.0}
    for name, opts in (("diloco", h1), ("localsgd", {"period": 1})):
        t = _trainer(comm, name, opts, 8 * 6 * comm.size, 8, 0.05, _net(9))
        start = _params(t.model).clone()
        t.clock_start = time.perf_counter()
        t.train_one_epoch(0)
        finals[name] = _params(t.model)
    out["h1_max_difference"] = float((finals["diloco"] - finals["localsgd"]).abs().max())
    out["h1_drift"] = float((finals["localsgd"] - start).abs().max())
    return out


def target(comm) -> dict:  # noqa: ANN001
    """allreduce and DiLoCo at its defaults to task 1a's light target (70 %) on the
    generated set, with the stand-in: reached, accuracy, bytes and steps."""
    out = {}
    for name in ("allreduce", "diloco"):
        trainer = _trainer(comm, name, {}, 1024, 32, 0.1 * comm.size, _net(5))
        progress = trainer.fit()
        out[name] = {
            "reached": progress.time_to_target is not None,
            "accuracy": progress.best_val_accuracy,
            "bytes": progress.comm_bytes,
            "steps": progress.step,
        }
    return out


def main() -> None:
    from mlbench_worker.training.comm import Communicator

    torch.set_num_threads(1)
    comm = Communicator("mpi")
    result = {"steps": steps, "target": target}[sys.argv[1]](comm)
    comm.close()
    if comm.rank == 0:
        print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
