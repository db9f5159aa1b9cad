"""The task catalogue: plain data every part of the platform reads, consistent with the
worker's own task definitions."""

import subprocess
import sys

import pytest

from mlbench_worker.backend_benchmark import TASK as BACKEND_BENCHMARK
from mlbench_worker.shared import catalogue
from mlbench_worker.tasks import TASKS as WORKER_TASKS


def test_importing_it_pulls_neither_torch_nor_django():
    code = (
        "import sys, mlbench_worker.shared.catalogue; "
        "print(sorted(m for m in ('torch', 'django') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _training():
    return {n: t for n, t in catalogue.TASKS.items() if t.kind == catalogue.TRAINING}


def test_every_entry_has_worker_code_and_every_worker_task_an_entry():
    # Training tasks run the training code; the measurement (the backend benchmark)
    # has a package of its own, dispatched by name.
    assert set(_training()) == set(WORKER_TASKS)
    measurements = set(catalogue.TASKS) - set(_training())
    assert measurements == {BACKEND_BENCHMARK}
    for name, info in _training().items():
        task = WORKER_TASKS[name]
        assert (task.model, task.dataset) == (info.model, info.dataset)
        assert (task.batch_size, task.base_lr, task.max_epochs) == (
            info.batch_size,
            info.learning_rate,
            info.max_epochs,
        )
        assert task.targets == {g: goal.value for g, goal in info.goals.items()}


def test_entries_are_complete():
    assert catalogue.DEFAULT_TASK in catalogue.TASKS
    for info in _training().values():
        assert not info.measurement
        assert info.default_goal in info.goals
        assert info.datasets == ("auto", info.dataset, "synthetic")
        assert info.throughput_unit.endswith("/s") and info.throughput_metric
        assert info.time_budget > 0 and info.title
        for goal in info.goals.values():
            assert goal.direction in (catalogue.UP, catalogue.DOWN) and goal.source


def test_the_communication_benchmark_is_a_measurement():
    info = catalogue.get(BACKEND_BENCHMARK)
    assert info.kind == catalogue.MEASUREMENT and info.measurement
    assert info.goals == {} and info.datasets == () and not info.default_goal
    assert info.throughput_metric == "busbw_mbps" and info.throughput_unit == "Mbit/s"
    assert info.time_budget > 0 and info.title == "PyTorch Distributed Backend benchmarking"
    assert info.seed_images == ("mlbench/pytorch-backend-benchmark",)
    assert catalogue.is_measurement(BACKEND_BENCHMARK)
    assert not catalogue.is_measurement(None) and not catalogue.is_measurement("nope")


def test_goal_directions():
    up = catalogue.Goal("val_accuracy", 0.8, catalogue.UP)
    down = catalogue.Goal("val_perplexity", 80.0, catalogue.DOWN)
    assert up.reached(0.8) and up.reached(0.9) and not up.reached(0.79)
    assert down.reached(80.0) and down.reached(70.0) and not down.reached(81.0)


def test_unknown_task_names_the_known_ones():
    with pytest.raises(KeyError) as raised:
        catalogue.get("resnet18-mnist")
    assert "task 'resnet18-mnist' is not known; known tasks: resnet20-cifar10" in str(raised.value)


@pytest.mark.parametrize(
    "image, task",
    [
        ("mlbench/pytorch-cifar10-resnet20-all-reduce:latest", "resnet20-cifar10"),
        ("mlbench/pytorch-cifar10-resnet20-all-reduce", "resnet20-cifar10"),
        ("mlbench/pytorch-cifar10-resnet20-all-reduce:3.0.0", "resnet20-cifar10"),
        ("mlbench/pytorch-cifar10-resnet20-ddp:latest", "resnet20-cifar10"),
        ("mlbench/pytorch-epsilon-logistic-regression-all-reduce:latest", "logreg-epsilon"),
        ("mlbench/pytorch-wmt16-gnmt-all-reduce:latest", None),
        ("mlbench/pytorch-wmt17-transformer-all-reduce:latest", "transformer-wmt17"),
        ("mlbench/pytorch-wikitext2-lstm-all-reduce:latest", "awd-lstm-wikitext2"),
        ("mlbench/pytorch-backend-benchmark:latest", BACKEND_BENCHMARK),
        ("localhost:5000/mine", None),
        ("", None),
    ],
)
def test_seed_image_names_map_to_tasks_tag_ignored(image, task):
    found = catalogue.by_image(image)
    assert (found.name if found else None) == task


def test_union_of_goals_and_data_sets():
    assert catalogue.goal_names() == ["light", "standard", "paper"]
    assert catalogue.dataset_names() == [
        "auto", "cifar10", "synthetic", "epsilon", "imagenet", "wikitext2", "wmt17",
    ]  # fmt: skip


def test_language_models_reach_their_goals_from_above_and_say_which_algorithms_they_refuse():
    lstm, gpt = catalogue.get("awd-lstm-wikitext2"), catalogue.get("gpt-wikitext2")
    for info in (lstm, gpt):
        assert info.throughput_unit == "tokens/s" and info.throughput_metric == "tokens_per_sec"
        assert {g.metric for g in info.goals.values()} == {"val_perplexity"}
        assert all(g.direction == catalogue.DOWN for g in info.goals.values())
        assert info.goals["standard"].reached(info.goals["standard"].value - 1)
        assert not info.goals["standard"].reached(info.goals["standard"].value + 1)
    assert (lstm.goal("standard").value, lstm.goal("light").value) == (70.0, 90.0)
    refused = dict(lstm.not_admitted)
    assert set(refused) == {"localsgd", "decentralized", "signsgd", "diloco"}
    assert not set(refused) & set(lstm.algorithms)
    assert set(lstm.algorithms) | set(refused) == set(catalogue.GENERAL_ALGORITHMS)
    assert lstm.implementations == gpt.implementations == ("reference", "torch-ddp")


def test_a_refused_algorithm_is_refused_with_the_tasks_reason(capsys):
    from mlbench_worker.training.options import parse_args

    with pytest.raises(SystemExit):
        parse_args(["awd-lstm-wikitext2", "--dataset", "synthetic", "--algorithm", "localsgd"])
    message = capsys.readouterr().err
    assert "does not admit 'localsgd' (its ranks average models" in message
    assert "running average" in catalogue.get("awd-lstm-wikitext2").why_not("localsgd")
    assert catalogue.get("awd-lstm-wikitext2").why_not("topk") == ""


def test_signsgd_is_refused_where_the_task_steps_with_another_optimizer(capsys):
    from mlbench_worker.training.options import parse_args

    for task, optimizer in (("gpt-wikitext2", "AdamW"), ("awd-lstm-wikitext2", "averaged SGD")):
        with pytest.raises(SystemExit):
            parse_args([task, "--dataset", "synthetic", "--algorithm", "signsgd"])
        message = capsys.readouterr().err
        assert "does not admit 'signsgd' (EF-SignSGD compresses and applies momentum" in message
        assert optimizer in message
    # Tasks that train with torch's momentum SGD run it with the reference's default.
    config = parse_args(["resnet20-cifar10", "--algorithm", "signsgd"])
    assert config.algorithm_options["compress"] == "step"


def test_a_run_follows_its_algorithms_recipe_only_with_its_defaults():
    from mlbench_worker.shared.algorithm_catalogue import ALGORITHMS, follows_recipe

    for name, algorithm in ALGORITHMS.items():
        assert follows_recipe(name, algorithm.defaults())
    # A run stored before an option existed ran another algorithm: not today's recipe;
    # allreduce stored bare is a run from before algorithms had options (fp32, the recipe).
    assert not follows_recipe("powersgd", {"rank": 2}) and not follows_recipe("signsgd", {})
    assert follows_recipe("allreduce", {})
    assert not follows_recipe("powersgd", {"rank": 4})
    assert not follows_recipe("allreduce", {"precision": "bf16"})
    assert not follows_recipe("carrier-pigeon", {})
