"""A run's algorithm and its options through POST /api/runs/ (run_rules/algorithms.py):
defaults, the task's list, each option's bounds, and what the worker's command gets."""

import pytest

from mlbench_master.api.models import Run
from mlbench_master.cluster.mpirun import worker_argv
from mlbench_master.runs import lifecycle
from mlbench_worker.shared.algorithm_catalogue import ALGORITHMS

pytestmark = pytest.mark.django_db


def create(client, **fields):
    return client.post("/api/runs/", {"name": "algo", **fields}, format="json")


def test_a_run_without_an_algorithm_is_todays_allreduce_with_an_unchanged_command(
    api, redis_settings
):
    body = create(api).json()
    assert (body["algorithm"], body["algorithm_options"]) == ("allreduce", {"precision": "fp32"})
    assert body["manifest"]["config"]["algorithm"] == "allreduce"
    assert body["manifest"]["setup"]["algorithm_options"] == {"precision": "fp32"}
    argv = worker_argv(lifecycle.run_spec(Run.objects.get(pk=body["id"])))
    assert "--algorithm" not in argv and "--algorithm-option" not in argv


POWERSGD = {"rank": 2, "min_compression_rate": 2.0, "warmup_steps": 0}  # the recipe's defaults


@pytest.mark.parametrize(
    "algorithm, options, stored, flags",
    [
        ("powersgd", {"rank": 4}, {**POWERSGD, "rank": 4},
         ["--algorithm-option", "min_compression_rate=2", "--algorithm-option", "rank=4"]),
        ("powersgd", None, POWERSGD,
         ["--algorithm-option", "min_compression_rate=2", "--algorithm-option", "rank=2"]),
        ("topk", {"density": "0.05"}, {"density": 0.05}, ["--algorithm-option", "density=0.05"]),
        ("signsgd", {}, {"scale": "tensor", "compress": "step", "momentum": "none"},
         ["--algorithm-option", "compress=step", "--algorithm-option", "momentum=none"]),
        ("localsgd", {"period": 8}, {"period": 8}, ["--algorithm-option", "period=8"]),
        ("decentralized", None, {"topology": "ring"}, ["--algorithm-option", "topology=ring"]),
        ("allreduce", {"precision": "BF16"}, {"precision": "bf16"},
         ["--algorithm-option", "precision=bf16"]),
    ],
)  # fmt: skip
def test_each_algorithm_is_stored_with_every_option_and_passed_to_the_worker(
    api, redis_settings, algorithm, options, stored, flags
):
    response = create(api, algorithm=algorithm, algorithm_options=options)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["algorithm"], body["algorithm_options"]) == (algorithm, stored)
    argv = worker_argv(lifecycle.run_spec(Run.objects.get(pk=body["id"])))
    at = argv.index("--algorithm")
    assert argv[at + 1] == algorithm and argv[at + 2 : at + 2 + len(flags)] == flags


@pytest.mark.parametrize(
    "fields, field, words",
    [
        ({"algorithm": "carrier-pigeon"}, "algorithm",
         "'carrier-pigeon' is not known of task resnet20-cifar10's: allreduce, powersgd"),
        ({"algorithm": "powersgd", "algorithm_options": {"rank": 0}}, "algorithm_options",
         "rank must be at least 1, not 0"),
        ({"algorithm": "powersgd", "algorithm_options": {"ranks": 2}}, "algorithm_options",
         "powersgd has no option 'ranks'; its options: rank"),
        ({"algorithm": "topk", "algorithm_options": {"density": 0}}, "algorithm_options",
         "density must be more than 0 and at most 1"),
        ({"algorithm": "topk", "algorithm_options": {"density": 1.5}}, "algorithm_options",
         "density must be more than 0 and at most 1"),
        ({"algorithm": "localsgd", "algorithm_options": {"period": 0}}, "algorithm_options",
         "period must be at least 1"),
        ({"algorithm": "decentralized", "algorithm_options": {"topology": "torus"},
          "num_workers": 4}, "algorithm_options", "topology torus needs a worker count"),
        ({"algorithm": "decentralized", "num_workers": 1}, "algorithm_options",
         "topology ring needs 2 workers or more"),
        ({"algorithm_options": "rank=2"}, "algorithm_options", "an object of option: value"),
        ({"algorithm_options": [1]}, "algorithm_options", "an object of option: value"),
        ({"task": "backend-benchmark", "algorithm": "powersgd"}, "algorithm",
         "task backend-benchmark trains nothing"),
        # EF-SignSGD applies momentum SGD's step: the language models step with others.
        ({"task": "gpt-wikitext2", "algorithm": "signsgd"}, "algorithm",
         "is not one of task gpt-wikitext2's (EF-SignSGD compresses and applies momentum SGD's "
         "step in place of the optimizer's, and this task's optimizer is AdamW)"),
    ],
)  # fmt: skip
def test_bad_algorithms_and_options_are_a_400_naming_the_field(
    api, redis_settings, settings, fields, field, words
):
    settings.MLBENCH_LOCAL_WORKERS = 16
    response = create(api, **fields)
    assert response.status_code == 400, response.json()
    assert words in " ".join(response.json()["errors"][field])
    assert not Run.objects.exists()


def test_a_run_says_its_division_by_its_algorithms_recipe(api, redis_settings):
    recipe = create(api, algorithm="powersgd")
    assert recipe.status_code == 201, recipe.json()
    assert recipe.json()["division"] == "closed"
    changed = create(api, algorithm="powersgd", algorithm_options={"rank": 4}, queue=True)
    assert changed.status_code == 201, changed.json()
    assert changed.json()["division"] == "open"


def test_a_torus_is_formed_where_the_worker_count_allows(api, redis_settings, settings):
    settings.MLBENCH_LOCAL_WORKERS = settings.MLBENCH_MAX_WORKERS = 9
    response = create(api, algorithm="decentralized", algorithm_options={"topology": "torus"},
                      num_workers=9)  # fmt: skip
    assert response.status_code == 201, response.json()


def test_a_custom_command_has_no_algorithm(staff_api, redis_settings):
    body = create(staff_api, custom_image_command="python mine.py").json()
    assert (body["algorithm"], body["algorithm_options"]) == ("", {})
    refused = create(staff_api, custom_image_command="python mine.py", algorithm="topk")
    assert "a custom command trains as it likes" in refused.json()["errors"]["algorithm"][0]


def test_a_resumed_run_keeps_its_parents_algorithm_and_no_other(api, make_run, redis_settings):
    from tests.api.test_resume import checkpoint

    options = {**POWERSGD, "rank": 4}  # as a run stores them: every option
    parent = make_run(state=Run.FAILED, num_workers=2, algorithm="powersgd",
                      algorithm_options=options)  # fmt: skip
    checkpoint(parent, 1, 196, 30.0, algorithm="powersgd", algorithm_options=options)
    same = create(api, resume_from=parent.pk).json()
    assert (same["algorithm"], same["algorithm_options"]) == ("powersgd", options)
    Run.objects.filter(pk=same["id"]).update(state=Run.CANCELLED)
    # The worker's model state (replicas, memories) belongs to its algorithm: refused at once.
    other = create(api, resume_from=parent.pk, algorithm="topk")
    assert other.status_code == 400
    assert "checkpoint is for algorithm 'powersgd'" in other.json()["errors"]["resume_from"][0]
    rank = create(api, resume_from=parent.pk, algorithm_options={"rank": 2})
    assert "algorithm_options" in rank.json()["errors"]["resume_from"][0]


def test_a_checkpoint_from_before_algorithms_resumes_as_fp32_allreduce(
    api, make_run, redis_settings
):
    from tests.api.test_resume import checkpoint

    parent = make_run(state=Run.FAILED, num_workers=2)
    checkpoint(parent, 1, 196, 30.0)  # an identity without algorithm
    assert create(api, resume_from=parent.pk).status_code == 201


def test_the_defaults_and_the_catalogue_agree():
    from mlbench_master import run_rules

    assert run_rules.DEFAULTS["algorithm"] == next(iter(ALGORITHMS))
