"""Authentication and permissions: user tokens, sessions with CSRF, per-run worker tokens,
public reads, the token command."""

import datetime as dt
import io

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from mlbench_master.accounts.users import issue_user_token
from mlbench_master.api.models import Metric, Run
from mlbench_master.runs import lifecycle
from tests.api.conftest import worker_client
from tests.summaries import summary_body

pytestmark = pytest.mark.django_db

WRITES = [
    ("post", "/api/metrics/", {"pod_name": "w", "name": "a", "value": 1}),
    ("post", "/api/runs/", {"name": "r", "num_workers": 1}),
]


@pytest.mark.parametrize("method, path, body", WRITES)
def test_writes_need_a_token(anon, method, path, body):
    r = getattr(anon, method)(path, body, format="json")
    assert r.status_code == 401
    assert r["WWW-Authenticate"].startswith('Token realm="mlbench"')
    assert 'Basic realm="mlbench"' in r["WWW-Authenticate"]
    assert r.json()["detail"]


@pytest.mark.parametrize("path", ["/api/runs/", "/api/pods/", "/api/metrics/"])
def test_reads_need_a_token_unless_public(anon, settings, path):
    assert anon.get(path).status_code == 401
    settings.MLBENCH_PUBLIC_READ = True
    assert anon.get(path).status_code == 200
    # public read never means public write
    assert (
        anon.post("/api/runs/", {"name": "r", "num_workers": 1}, format="json").status_code == 401
    )


def test_delete_needs_a_token(anon, make_run, settings):
    settings.MLBENCH_PUBLIC_READ = True
    run = make_run()
    assert anon.delete(f"/api/runs/{run.pk}/").status_code == 401
    assert Run.objects.filter(pk=run.pk).exists()


@pytest.mark.parametrize(
    "header",
    [
        "Token 0123456789abcdef0123456789abcdef01234567",
        "Token mlbr_1_0000000000000000000000000000000000000000",
        "Token mlbr_x_y",
        # "²" sent as UTF-8, as a WSGI server hands it over: a digit to isdigit(), not to int()
        "Token mlbr_\u00c2\u00b2_y",
        "Token mlbr_" + "9" * 5000 + "_y",  # beyond what int() reads from text
        "Token two words",
        "Bearer nope",
    ],
)
def test_wrong_tokens(db, header, run):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    r = client.get("/api/runs/")
    assert r.status_code == 401, r.json()
    assert r.json()["detail"]


def test_bearer_keyword_works(user_token):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {user_token}")
    assert client.get("/api/runs/").status_code == 200


def test_worker_token_posts_only_for_its_run(run, make_run):
    other = make_run()
    w = worker_client(run)
    ok = [{"run_id": run.pk, "name": "loss", "value": 1, "uid": "a"}]
    assert w.post("/api/metrics/", ok, format="json").status_code == 201
    r = w.post("/api/metrics/", {"run_id": other.pk, "name": "loss", "value": 1}, format="json")
    assert r.status_code == 403
    assert f"run {run.pk} may not post metrics of run {other.pk}" in r.json()["detail"]
    mixed = ok + [{"run_id": other.pk, "name": "loss", "value": 1}]
    assert w.post("/api/metrics/", mixed, format="json").status_code == 403
    r = w.post("/api/metrics/", {"pod_name": "w-0", "name": "cpu", "value": 1}, format="json")
    assert r.status_code == 403
    body = summary_body()
    assert w.post(f"/api/runs/{other.pk}/summary/", body, format="json").status_code == 403
    assert w.post(f"/api/runs/{run.pk}/summary/", body, format="json").status_code == 200
    # nothing else: no reads, no run creation, no deletes
    assert w.get("/api/runs/").status_code == 403
    assert w.get(f"/api/metrics/{run.pk}/?metric_type=run").status_code == 403
    assert w.delete(f"/api/runs/{run.pk}/").status_code == 403
    assert w.post("/api/runs/", {"name": "x", "num_workers": 1}, format="json").status_code == 403
    assert Metric.objects.count() == 1


def test_worker_token_of_a_deleted_run_or_changed_salt_fails(run):
    w = worker_client(run)
    Run.objects.filter(pk=run.pk).update(token_salt="other")
    r = w.post("/api/metrics/", {"run_id": run.pk, "name": "a", "value": 1}, format="json")
    assert r.status_code == 401


def test_worker_token_expires_after_the_grace_period(run, settings):
    settings.MLBENCH_RUN_TOKEN_GRACE = 60
    measured = (timezone.now() - dt.timedelta(seconds=31)).isoformat()  # before the end
    point = {"run_id": run.pk, "name": "a", "value": 1, "date": measured}
    Run.objects.filter(pk=run.pk).update(
        state=Run.FINISHED, finished_at=timezone.now() - dt.timedelta(seconds=30)
    )
    assert worker_client(run).post("/api/metrics/", point, format="json").status_code == 201
    Run.objects.filter(pk=run.pk).update(finished_at=timezone.now() - dt.timedelta(seconds=90))
    r = worker_client(run).post("/api/metrics/", point, format="json")
    assert r.status_code == 401 and "expired" in r.json()["detail"]


def test_worker_token_format(run):
    token = lifecycle.worker_token(run)
    assert token.startswith(f"mlbr_{run.pk}_") and lifecycle.run_for_token(token) == run
    assert lifecycle.run_for_token(token + "0") is None


def test_session_needs_csrf(db):
    user = User.objects.create_user("carol")
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(user)
    assert client.get("/api/runs/").status_code == 200
    r = client.post("/api/runs/", {"name": "r", "num_workers": 1}, format="json")
    assert r.status_code == 403 and "CSRF" in r.json()["detail"]


def test_token_command():
    out = io.StringIO()
    call_command("mlbench_token", "dave", "--create-user", "--superuser", stdout=out)
    token = out.getvalue().strip()
    assert len(token) == 40
    user = User.objects.get(username="dave")
    assert user.is_superuser and user.is_staff and not user.has_usable_password()
    again = io.StringIO()
    call_command("mlbench_token", "dave", stdout=again)
    assert again.getvalue().strip() == token
    assert issue_user_token("dave") == token
    with pytest.raises(CommandError, match="--create-user"):
        call_command("mlbench_token", "nobody")


# --- HTTP Basic with a token as the password (the original client's only way) -------------


def _basic(client: APIClient, user: str, password: str) -> APIClient:
    import base64

    raw = base64.b64encode(f"{user}:{password}".encode()).decode()
    client.credentials(HTTP_AUTHORIZATION=f"Basic {raw}")
    return client


def test_basic_with_the_users_token_is_that_user(user_token):
    user = Token.objects.get(key=user_token).user
    r = _basic(APIClient(), user.username, user_token).post(
        "/api/runs/", {"name": "b", "num_workers": 1, "custom_image_command": "true"}
    )
    # the user is known (not 401): a non-staff user may not run a custom command (403)
    assert r.status_code == 403 and "staff" in r.json()["detail"]
    assert _basic(APIClient(), user.username, user_token).get("/api/runs/").status_code == 200


@pytest.mark.parametrize(
    "who, password, message",
    [
        ("alice", "not-a-token", "Invalid token"),
        ("mallory", None, "does not belong to user 'mallory'"),
        ("alice", "", "API token as the password"),
    ],
)
def test_basic_refusals_name_the_problem(user_token, who, password, message):
    password = user_token if password is None else password
    r = _basic(APIClient(), who, password).get("/api/runs/")
    assert r.status_code == 401 and message in r.json()["detail"]
    assert "Basic" in r["WWW-Authenticate"]


def test_basic_with_a_worker_token_keeps_the_worker_rules(run):
    token = lifecycle.worker_token(run)
    worker = _basic(APIClient(), f"run-{run.pk}-worker", token)
    r = worker.post("/api/metrics/", {"run_id": run.pk, "name": "loss", "value": "0.5"})
    assert r.status_code == 201, r.content
    assert Metric.objects.filter(run_id=run.pk, name="loss").count() == 1
    assert worker.get("/api/runs/").status_code == 403  # still only its run's writes
    other = _basic(APIClient(), "alice", token).get("/api/runs/")
    assert other.status_code == 401 and f"run-{run.pk}-worker" in other.json()["detail"]


def test_browsers_are_never_offered_basic(anon):
    for mode in ("cors", "navigate"):
        r = anon.get("/api/runs/", HTTP_SEC_FETCH_MODE=mode, HTTP_SEC_FETCH_SITE="none")
        assert r.status_code == 401 and "Basic" not in r["WWW-Authenticate"]
    assert "Basic" in anon.get("/api/runs/")["WWW-Authenticate"]  # a script is


@pytest.mark.parametrize(
    "headers",
    [
        {"HTTP_SEC_FETCH_SITE": "cross-site"},
        {"HTTP_SEC_FETCH_SITE": "same-site"},
        {"HTTP_ORIGIN": "https://evil.example"},
    ],
)
def test_a_write_with_basic_from_another_sites_page_is_refused(staff_token, headers):
    user = Token.objects.get(key=staff_token).user
    client = _basic(APIClient(), user.username, staff_token)
    form = {"name": "csrf", "num_workers": "1", "image_name": "custom_image",
            "custom_image_command": "touch /tmp/pwned"}  # fmt: skip
    r = client.post("/api/runs/", form, **headers)
    assert r.status_code == 403 and "another site" in r.json()["detail"]
    assert not Run.objects.exists()
    assert client.get("/api/runs/", **headers).status_code == 200  # reads stay open


def test_a_write_with_basic_from_this_master_or_a_script_passes(staff_token, redis_settings):
    user = Token.objects.get(key=staff_token).user
    client = _basic(APIClient(), user.username, staff_token)
    body = {"name": "same", "num_workers": "1", "custom_image_command": "true"}
    r = client.post("/api/runs/", body, HTTP_ORIGIN="http://testserver",
                    HTTP_SEC_FETCH_SITE="same-origin")  # fmt: skip
    assert r.status_code == 201, r.content
    Run.objects.all().delete()
    assert client.post("/api/runs/", body).status_code == 201  # no headers: a script


def test_a_session_form_post_without_the_csrf_token_is_refused(db):
    user = User.objects.create_user("sam", password="pw", is_staff=True)
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(user)
    r = client.post("/api/runs/", {"name": "x", "num_workers": "1"})
    assert r.status_code == 403 and "CSRF" in r.json()["detail"]
    assert not Run.objects.exists()


def test_basic_with_a_latin_1_user_name(db):
    token = issue_user_token("josé", create_user=True)
    import base64

    raw = base64.b64encode("josé:".encode("latin-1") + token.encode()).decode()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Basic {raw}")
    assert client.get("/api/runs/").status_code == 200
