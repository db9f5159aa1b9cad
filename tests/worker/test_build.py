"""One set-up path for every task: each task names the module that sets it up, the steps all
tasks share are done once (training/build.py), and the gradient exchange is chosen in one place."""

from __future__ import annotations

import argparse
import importlib
import sys
import types

import torch

from mlbench_worker.tasks import TASKS
from mlbench_worker.training.options import TASK_OPTIONS, build_parser, parse_args


def test_every_task_names_a_setup_module_with_a_build():
    for name, task in TASKS.items():
        module = importlib.import_module(task.setup)
        assert callable(module.build), name
    assert {t.setup for t in TASKS.values()} == {
        "mlbench_worker.tasks.cifar10.setup",
        "mlbench_worker.tasks.imagenet.setup",
        "mlbench_worker.tasks.epsilon.setup",
        "mlbench_worker.tasks.wikitext2.setup",
        "mlbench_worker.tasks.wmt.setup",
    }


def test_task_options_are_options_of_the_command():
    known = {o for action in build_parser()._actions for o in action.option_strings}
    assert set(TASK_OPTIONS) <= known
    for name, task in TASKS.items():
        assert set(task.task_options) <= set(TASK_OPTIONS), name


def test_build_run_sets_up_with_the_tasks_module_then_chooses_the_exchange(monkeypatch):
    from mlbench_worker.training import build

    calls = []

    class Trainer:
        comm = types.SimpleNamespace(size=2)

        def set_algorithm(
            self,
            name: str,
            options: dict,
            enabled: bool,
            bucket_mb: float | None = None,
            implementation: str = "reference",
        ) -> None:
            calls.append(("exchange", name, options, enabled, bucket_mb, implementation))

    def task_build(args, comm, task, say, open_reporter):
        calls.append(("build", task.name))
        return build.Built(Trainer(), "synthetic", "", "X", 0.1, "data x", {})

    module = types.ModuleType("probe_setup")
    module.build = task_build
    monkeypatch.setitem(sys.modules, "probe_setup", module)
    task = types.SimpleNamespace(name="probe", setup="probe_setup")
    config = parse_args(["resnet20-cifar10", "--dataset", "synthetic", "--bucket-mb", "0.5"])
    built = build.build_run(config, None, task, print, lambda: None)
    # No --algorithm nor --implementation: the parser's defaults, checked and complete.
    assert calls == [
        ("build", "probe"),
        ("exchange", "allreduce", {"precision": "fp32"}, True, 0.5, "reference"),
    ]
    assert built.dataset == "synthetic" and built.results(built.trainer) == {}


def test_place_model_gives_the_same_weights_for_a_seed():
    from mlbench_worker.models import build_model
    from mlbench_worker.training.build import place_model
    from mlbench_worker.training.comm import Communicator

    comm = Communicator("mpi")
    config = parse_args(["resnet20-cifar10", "--dataset", "synthetic", "--seed", "3"])
    config = config.replace(channels_last=True)
    a = place_model(lambda: build_model("resnet20"), config, comm)
    torch.manual_seed(99)  # the random state before does not matter
    b = place_model(lambda: build_model("resnet20"), config, comm)
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)
    conv = next(p for p in a.parameters() if p.dim() == 4)
    assert conv.is_contiguous(memory_format=torch.channels_last)


def test_the_run_config_holds_every_option_the_parser_makes_and_no_other():
    import dataclasses

    import pytest

    from mlbench_worker.training.config import RunConfig

    config = parse_args(["resnet20-cifar10", "--dataset", "synthetic"])
    assert isinstance(config, RunConfig) and config.max_epochs == 164  # the task's, filled
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.seed = 1  # type: ignore[misc]
    parsed = argparse.Namespace(**dataclasses.asdict(config))
    del parsed.log_every
    parsed.surprise = 1
    with pytest.raises(
        TypeError, match=r"only parsed \['surprise'\], never parsed \['log_every'\]"
    ):
        RunConfig.from_namespace(parsed)
