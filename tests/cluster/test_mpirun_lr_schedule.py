"""The one command builder passes a run's learning-rate schedule (task 1b's --lr-schedule)
and nothing for the task's default, so a default run's command is what it was before; the
worker parses what it is given (the flag is one the worker knows)."""

from mlbench_master.cluster.base import RunSpec
from mlbench_master.cluster.mpirun import worker_argv
from mlbench_worker.training.options import parse_args


def test_a_chosen_schedule_is_passed_and_the_default_adds_nothing(tmp_path):
    spec = RunSpec(id=7, task="resnet50-imagenet", dataset="synthetic", lr_schedule="poly")
    argv = worker_argv(spec)
    assert argv[argv.index("--lr-schedule") + 1] == "poly"
    args = parse_args([*argv[3:], "--data-dir", str(tmp_path)])
    assert args.lr_schedule == "poly"
    default = worker_argv(RunSpec(id=7, task="resnet50-imagenet", dataset="synthetic"))
    assert "--lr-schedule" not in default
    assert parse_args([*default[3:], "--data-dir", str(tmp_path)]).lr_schedule == "step"
