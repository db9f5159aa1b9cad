"""The domain's errors reach clients through one mapping (api/errors.py, DOMAIN_ERRORS):
each gets its status and the API's one error shape, whichever endpoint raised it, and no
view catches them on its own.

The refusals are made for real where a request can cause them (rules broken, a run
active, Redis or the database unreachable, a chart without data); the one a request
cannot cause at will (a resumed run deleted between its check and its store) is given to
the real handler.
"""

import ast
from pathlib import Path

import pytest

from mlbench_master import run_rules
from mlbench_master.api.errors import DOMAIN_ERRORS, exception_handler
from mlbench_master.api.models import Run, Series
from mlbench_master.bundles import refusals, trust
from mlbench_master.grading import receive, scoring
from mlbench_master.runs import frozen, lifecycle
from mlbench_worker.shared import plots
from mlbench_worker.shared.evaluation.model_audit import ModelRefused
from mlbench_worker.shared.evaluation.predictions import PredictionsRefused

pytestmark = pytest.mark.django_db

API = Path(__file__).resolve().parents[2] / "mlbench_master" / "api"
STAFF_FIELD = {"custom_image_command": "true"}


def _is_field_error(body: dict, field: str) -> None:
    """The 400 shape: `errors` names the field, `detail` is its first message."""
    assert set(body) == {"detail", "errors"}, body
    assert list(body["errors"]) == [field], body
    assert body["detail"] == f"{field}: {body['errors'][field][0]}", body


@pytest.mark.parametrize("path", ["/api/runs/", "/api/series/"])
def test_a_broken_run_rule_is_400_naming_the_field(api, path):
    r = api.post(path, {"name": "r", "num_workers": 0}, format="json")
    assert r.status_code == 400, r.content
    field = "num_workers" if path == "/api/runs/" else "workers"
    _is_field_error(r.json(), field)
    assert "MLBENCH_MAX_WORKERS" in r.json()["detail"]
    assert Run.objects.count() == 0 and Series.objects.count() == 0


@pytest.mark.parametrize("path", ["/api/runs/", "/api/series/"])
def test_a_staff_only_field_is_403_with_the_rule_in_detail(api, path):
    r = api.post(path, {"name": "r", "num_workers": 1, **STAFF_FIELD}, format="json")
    assert r.status_code == 403, r.content
    body = r.json()
    assert set(body) == {"detail"} and "custom_image_command" in body["detail"], body
    assert "staff" in body["detail"]
    assert Run.objects.count() == 0 and Series.objects.count() == 0


def test_an_active_run_is_409_with_the_lifecycles_words(api, redis_settings):
    first = api.post("/api/runs/", {"name": "first", "num_workers": 1}, format="json")
    assert first.status_code == 201, first.content
    r = api.post("/api/runs/", {"name": "second", "num_workers": 1}, format="json")
    assert r.status_code == 409
    active = Run.objects.get(pk=first.json()["id"])
    assert r.json() == {"detail": str(lifecycle.RunConflict(active))}


def test_redis_unreachable_is_503_and_the_run_is_kept_failed(api, settings):
    settings.RQ_QUEUES = {"runs": {"URL": "redis://127.0.0.1:1/0"}}
    r = api.post("/api/runs/", {"name": "lost?", "num_workers": 1}, format="json")
    assert r.status_code == 503
    run = Run.objects.get()
    assert run.state == Run.FAILED and run.reason.startswith("could not enqueue the run: ")
    assert r.json() == {
        "detail": f"{run.reason}; the run was stored as FAILED. Start Redis (REDIS_URL) and "
        "try again."
    }


def test_a_chart_without_its_data_is_409_with_what_is_missing(api, make_run):
    run = make_run(task="resnet20-cifar10")
    r = api.get(f"/api/runs/{run.pk}/plots/time-split.svg")
    assert r.status_code == 409, r.content
    assert r.json() == {"detail": "no time split to draw: the runs reported no step timings yet"}


@pytest.mark.django_db(transaction=True)
def test_a_database_that_does_not_answer_is_503_not_500():
    """A database restart is nothing the client did, and the same request works once the
    database is back (the chaos series found 500s here while PostgreSQL restarted)."""
    from django.db import connection
    from rest_framework.test import APIClient

    from mlbench_master.accounts.users import issue_user_token
    from tests.services import free_port

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {issue_user_token('u', create_user=True)}")
    port = connection.settings_dict["PORT"]
    connection.close()
    connection.settings_dict["PORT"] = str(free_port())  # nothing listens there
    try:
        r = client.get("/api/runs/")
    finally:
        connection.close()
        connection.settings_dict["PORT"] = port
    assert r.status_code == 503, r.content
    assert r.json() == {"detail": "the database does not answer; try again shortly"}
    assert client.get("/api/runs/").status_code == 200  # back: the same request works


@pytest.mark.parametrize(
    ("error", "status", "body"),
    [
        (
            run_rules.RunRefused({"seed": ["seed -1 is not between 0 and 2147483647"]}),
            400,
            {
                "detail": "seed: seed -1 is not between 0 and 2147483647",
                "errors": {"seed": ["seed -1 is not between 0 and 2147483647"]},
            },
        ),
        (
            run_rules.ResumeRefused("there is no run 7"),
            400,
            {
                "detail": "resume_from: there is no run 7",
                "errors": {"resume_from": ["there is no run 7"]},
            },
        ),
        (run_rules.StaffOnly("staff only"), 403, {"detail": "staff only"}),
        (
            lifecycle.RunConflict(None, queued=2),
            409,
            {"detail": str(lifecycle.RunConflict(None, 2))},
        ),
        (
            lifecycle.QueueUnavailable("could not enqueue the run: refused"),
            503,
            {
                "detail": "could not enqueue the run: refused; the run was stored as FAILED. "
                "Start Redis (REDIS_URL) and try again."
            },
        ),
        (plots.PlotError("no speed-up to draw"), 409, {"detail": "no speed-up to draw"}),
        (
            PredictionsRefused("the posted file lacks step"),
            400,
            {
                "detail": "predictions: the posted file lacks step",
                "errors": {"predictions": ["the posted file lacks step"]},
            },
        ),
        (
            scoring.SetRefused("dataset", "'x' is not a data set of t"),
            400,
            {
                "detail": "dataset: 'x' is not a data set of t",
                "errors": {"dataset": ["'x' is not a data set of t"]},
            },
        ),
        (receive.TooLarge("over the cap"), 413, {"detail": "over the cap"}),
        (
            lifecycle.ReadOnlyRun(3, "ab12", "x"),
            409,
            {"detail": str(lifecycle.ReadOnlyRun(3, "ab12", "x"))},
        ),
        (
            lifecycle.ReadOnlyRun(3, "ab12", "x", staff_may=True),
            403,
            {"detail": str(lifecycle.ReadOnlyRun(3, "ab12", "x", staff_may=True))},
        ),
        (
            refusals.BundleRefused("member 'runs/1/run.json' is missing"),
            400,
            {
                "detail": "bundle: member 'runs/1/run.json' is missing",
                "errors": {"bundle": ["member 'runs/1/run.json' is missing"]},
            },
        ),
        (refusals.AlreadyHere("own runs"), 409, {"detail": "own runs"}),
        (refusals.NotExportable("run 3 is STARTED"), 409, {"detail": "run 3 is STARTED"}),
        (
            ModelRefused("the model's input is tensor(int64), not tensor(float)"),
            400,
            {
                "detail": "model: the model's input is tensor(int64), not tensor(float)",
                "errors": {"model": ["the model's input is tensor(int64), not tensor(float)"]},
            },
        ),
        (frozen.Frozen("run 3 ended (FINISHED)"), 409, {"detail": "run 3 ended (FINISHED)"}),
        (
            trust.TrustRefused("key", "not a key"),
            400,
            {"detail": "key: not a key", "errors": {"key": ["not a key"]}},
        ),
        (
            trust.NoSuchKey("fingerprint", "none"),
            404,
            {"detail": "fingerprint: none"},
        ),
        (trust.TrustUnchanged("key", "own"), 409, {"detail": "key: own"}),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else None,
)
def test_the_handler_answers_each_domain_error(error, status, body):
    """Several of these are ValueErrors, which the generic rule answers 400 without a
    field: the domain's mapping must come first."""
    response = exception_handler(error, {})
    assert (response.status_code, response.data) == (status, body)


def test_every_domain_error_is_tested_above():
    tested = {"RunRefused", "ResumeRefused", "StaffOnly", "RunConflict", "QueueUnavailable"}
    tested |= {"PlotError", "PredictionsRefused", "SetRefused", "TooLarge", "ReadOnlyRun"}
    tested |= {"BundleRefused", "NotExportable"}
    tested |= {"ModelRefused", "Frozen", "TrustRefused"}
    assert {kind.__name__ for kind, _ in DOMAIN_ERRORS} == tested


def catches(source: str, names: set[str]) -> list[int]:
    """Lines of `source` whose `except` names one of `names` (`except X`, `except m.X`,
    `except (A, m.X)`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ExceptHandler) and node.type is not None:
            kinds = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
            for kind in kinds:
                name = kind.attr if isinstance(kind, ast.Attribute) else getattr(kind, "id", "")
                if name in names:
                    found.append(node.lineno)
    return found


def test_no_view_catches_a_domain_error_itself():
    names = {kind.__name__ for kind, _ in DOMAIN_ERRORS}
    planted = "try:\n    f()\nexcept (KeyError, run_rules.StaffOnly):\n    pass\n"
    assert catches(planted, names) == [3]  # the check finds what it looks for
    problems = {
        path.name: lines
        for path in sorted(API.glob("*.py"))
        if path.name != "errors.py" and (lines := catches(path.read_text(), names))
    }
    assert not problems, f"answer these in api/errors.py (DOMAIN_ERRORS): {problems}"


def test_an_unknown_id_is_named_in_the_404(api):
    """get_object_or_404 says "No Run matches the given query."; the answer names the id."""
    for path, words in (("/api/runs/99999/", "run 99999 does not exist"),
                        ("/api/series/99999/", "series 99999 does not exist")):  # fmt: skip
        r = api.get(path)
        assert r.status_code == 404 and r.json() == {"detail": words}, (path, r.json())
