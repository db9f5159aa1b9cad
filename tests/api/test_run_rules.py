"""The run rules as functions (mlbench_master/run_rules/): resolve's three steps, fill, check
and derive, on plain data; the cluster's limits given as data (`ClusterLimits`) and asked
of the real local driver (`cluster_limits`); the one signature of the resume rule; the one
table of defaults (mlbench_master/run_defaults.py).

The same rules through POST /api/runs/ are held in test_runs.py, test_run_defaults.py,
test_resume.py, test_budget.py and the other test_run_*.py files.
"""

import ast
import copy
import dataclasses
from pathlib import Path

import pytest

from mlbench_master import run_rules
from mlbench_master.api.models import Metric, Run
from mlbench_master.cluster.base import RunSpec
from mlbench_master.run_defaults import DEFAULT_TASK_TIME_LIMIT, DEFAULTS

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
NOTHING_REFUSED = run_rules.ClusterLimits()


def refusal(request, cluster=NOTHING_REFUSED, user=None):
    with pytest.raises(run_rules.RunRefused) as refused:
        run_rules.resolve(run_rules.fill(request), user, cluster)
    return refused.value.errors


def test_check_changes_nothing_it_is_given_and_says_every_problem_at_once():
    run = run_rules.fill(
        {
            "name": "many",
            "num_workers": 0,
            "backend": "NCCL",
            "target": "best",
            "algorithm": "powersgd",
            "algorithm_options": {"rank": 0, "width": 3},
            "time_budget": 60.0,
            "time_limit": 100,
        }
    )
    before = copy.deepcopy(run)
    errors = run_rules.check(run, NOTHING_REFUSED)
    assert run == before
    assert list(errors) == [
        "num_workers", "target", "algorithm_options", "backend", "time_limit", "time_budget",
    ]  # fmt: skip
    assert len(errors["algorithm_options"]) == 2  # both options, not the first only
    # A filled request that breaks no rule checks clean.
    fine = run_rules.fill({"name": "fine", "num_workers": 1})
    assert run_rules.check(fine, NOTHING_REFUSED) == {}


def test_the_clusters_limits_given_as_data_decide_without_any_driver(settings):
    settings.MLBENCH_LOCAL_WORKERS = 1  # the local driver would refuse 2 workers...
    request = {"name": "data", "num_workers": 2, "num_cpus": 1.5}
    filled = run_rules.fill(request)
    assert run_rules.resolve(filled, None, NOTHING_REFUSED)["num_workers"] == 2  # ...unasked
    cluster = run_rules.ClusterLimits(
        workers={2: "two are more than this cluster has"}, cpus={1.5: "no node has 1.5 CPUs"}
    )
    assert refusal(request, cluster) == {
        "num_workers": ["two are more than this cluster has"],
        "num_cpus": ["no node has 1.5 CPUs"],
    }
    # What the cluster says of other numbers says nothing of this run's.
    other = run_rules.ClusterLimits(workers={3: "three are too many"}, cpus={4.0: "too many"})
    assert run_rules.resolve(filled, None, other)["num_cpus"] == 1.5
    lacking = run_rules.ClusterLimits(modules={"tensorflow": "/opt/workers/bin/python"})
    (message,) = refusal({"name": "tf", "implementation": "tensorflow"}, lacking)["implementation"]
    assert "cannot import (checked with /opt/workers/bin/python)" in message


def test_cluster_limits_asks_the_configured_driver_about_the_filled_request(settings):
    settings.MLBENCH_LOCAL_WORKERS = 1

    def limits(request):
        return run_rules.cluster_limits(run_rules.fill(request))

    asked = limits({"name": "default"})  # 2 workers: the table's
    assert list(asked.workers) == [DEFAULTS["num_workers"]]
    assert "this machine has 1 local worker slots" in asked.workers[DEFAULTS["num_workers"]]
    assert limits({"name": "one", "num_workers": 1}) == NOTHING_REFUSED
    # Over the operator's limit the rules refuse it themselves; the driver is not asked.
    assert limits({"name": "many", "num_workers": 99}) == NOTHING_REFUSED
    # A master whose driver cannot be set up refuses nothing for it: its job says why.
    settings.MLBENCH_CLUSTER = "no-such-cluster"
    assert limits({"name": "default"}) == NOTHING_REFUSED


def test_fill_takes_the_request_then_the_parent_then_the_defaults():
    parent = Run.objects.create(name="parent", state=Run.FAILED, num_workers=3, seed=7,
                                light_target=True, time_budget=60.0, time_limit=960)  # fmt: skip
    run = run_rules.fill({"name": "child", "resume_from": parent.pk, "num_cpus": 1.0})
    assert (run.fields["num_cpus"], run.fields["num_workers"], run.fields["seed"]) == (1.0, 3, 7)
    assert run.inherited["num_workers"] == 3 and "num_cpus" not in run.inherited
    # The parent has no epoch limit and no latency: those come from the table.
    assert (run.fields["max_epochs"], run.fields["latency"]) == (None, None)
    assert {"num_cpus", "num_workers", "seed"} <= run.given
    assert "max_epochs" not in run.given and "latency" not in run.given
    assert run.parent_id == parent.pk
    # light_target's goal and the limit are derived, once the request is checked.
    assert run.fields["target"] == "standard"
    fields = run_rules.derive(run)
    assert (fields["target"], fields["time_budget"], fields["time_limit"]) == ("light", 60.0, 960)


def test_derive_gives_the_time_limit_and_a_measurements_goal(settings):
    timed = run_rules.derive(run_rules.fill({"name": "timed", "time_budget": 60.5}))
    assert timed["time_limit"] == 61 + run_rules.TIME_LIMIT_MARGIN
    default = run_rules.derive(run_rules.fill({"name": "default"}))
    assert default["time_limit"] == DEFAULT_TASK_TIME_LIMIT
    bench = run_rules.derive(run_rules.fill({"name": "bench", "task": "backend-benchmark"}))
    assert (bench["target"], bench["backend"], bench["algorithm"]) == ("", "mpi,gloo", "")
    settings.MLBENCH_DEFAULT_TIME_LIMIT = 600
    own = run_rules.derive(run_rules.fill({"name": "own", "custom_image_command": "true"}))
    assert (own["time_limit"], own["implementation"]) == (600, "")


def test_the_resume_rule_compares_the_fields_resolve_decided():
    """One signature for both callers (the rules' check and runs.new_run): the new run's
    fields as resolve returns them."""
    parent = Run.objects.create(name="parent", state=Run.FAILED, num_workers=2, seed=7)
    identity = {"task": "resnet20-cifar10", "model": "resnet20", "num_workers": 2,
                "batch_size": 128, "seed": 7, "dataset": "synthetic"}  # fmt: skip
    Metric.objects.create(run=parent, name=run_rules.CHECKPOINT_METRIC, value=1.0,
                          metadata={"epoch": 1, "step": 10, "elapsed": 5.0,
                                    "identity": identity})  # fmt: skip
    child = run_rules.fill({"name": "child", "resume_from": parent.pk})
    fields = run_rules.resolve(child, None, NOTHING_REFUSED)
    point = run_rules.resume_point(parent.pk, fields)
    assert (point.run_id, point.epoch, point.identity["seed"]) == (parent.pk, 1, 7)
    with pytest.raises(run_rules.ResumeRefused, match="for seed 7, this run's seed is 8"):
        run_rules.resume_point(parent.pk, {**fields, "seed": 8})


def test_a_snapshot_made_by_hand_has_the_run_defaults():
    spec = RunSpec(id=1)
    for field in dataclasses.fields(RunSpec):
        name = "latency" if field.name == "latency_ms" else field.name
        if name in DEFAULTS and name != "time_limit":
            assert getattr(spec, field.name) == DEFAULTS[name], name
    budget = run_rules.task_time_budget(DEFAULTS["task"])
    assert spec.time_limit == DEFAULT_TASK_TIME_LIMIT == run_rules.default_time_limit(budget)


def int_literals(root: Path, values: set[int], allowed: set[str]) -> list[str]:
    """Where an int in `values` is written in the code under `root`, outside `allowed`
    files (paths from root's parent) and migrations, as path:line."""
    found = []
    for path in sorted(root.rglob("*.py")):
        name = path.relative_to(root.parent).as_posix()
        if name in allowed or "migrations" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=name)):
            if isinstance(node, ast.Constant) and type(node.value) is int:
                if node.value in values:
                    found.append(f"{name}:{node.lineno}")
    return found


def test_the_default_seed_and_limit_are_written_only_in_the_table(tmp_path):
    """A default written twice drifts (the seed was written in four modules and a help text):
    the master takes it from run_defaults.py, which takes the seed from the catalogue the
    worker's --seed reads too. Checked on a planted copy too, so the check can fail."""
    distinctive = {DEFAULTS["seed"], DEFAULT_TASK_TIME_LIMIT}
    table = {"mlbench_master/run_defaults.py"}
    assert int_literals(ROOT / "mlbench_master", distinctive, table) == []
    seed = {"mlbench_worker/shared/catalogue.py"}
    assert int_literals(ROOT / "mlbench_worker", {DEFAULTS["seed"]}, seed) == []
    planted = tmp_path / "badpkg"
    planted.mkdir()
    (planted / "series.py").write_text(f"seeds = [shared.pop('seed', {DEFAULTS['seed']})]\n")
    assert int_literals(planted, distinctive, set()) == ["badpkg/series.py:1"]
