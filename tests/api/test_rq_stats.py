"""django-rq's queue statistics at /admin/rq/: staff only, the dashboard's sign-in page for
everyone else, and only the queues mlbench uses ("runs")."""

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(db):
    client = Client()
    # With a usable password: the admin's frame then also links "Change password".
    client.force_login(User.objects.create_user("ops", password="pw-ops-1234", is_staff=True))
    return client


@pytest.fixture
def member(db):
    client = Client()
    client.force_login(User.objects.create_user("bob"))
    return client


def test_the_queue_page_is_at_admin_rq():
    assert reverse("django_rq:home") == "/admin/rq/"


@pytest.mark.parametrize("path", ["/admin/rq/", "/admin/rq/queues/0/", "/admin/rq/workers/0/"])
def test_signed_out_goes_to_the_dashboard_sign_in(db, path):
    r = Client().get(path)
    assert r.status_code == 302
    assert r["Location"] == f"{reverse('dashboard:login')}?next={path}"


@pytest.mark.parametrize("path", ["/admin/rq/", "/admin/rq/queues/0/", "/admin/", "/admin/login/"])
def test_signed_in_without_staff_rights_is_refused(member, path):
    r = member.get(path, follow=True)
    assert r.status_code == 403


def test_stats_json_needs_staff(member, db):
    assert Client().get("/admin/rq/stats.json").status_code == 401
    assert member.get("/admin/rq/stats.json").status_code == 401


def test_staff_see_the_runs_queue(staff, redis_settings):
    from django_rq import get_queue

    get_queue("runs").enqueue("mlbench_master.runs.jobs.run_job", 0)
    r = staff.get("/admin/rq/")
    assert r.status_code == 200
    page = r.content.decode()
    assert "<h1>Queues</h1>" in page
    assert reverse("django_rq:jobs", args=[0]) in page  # the link to the "runs" queue's jobs
    stats = staff.get("/admin/rq/stats.json").json()
    assert [(q["name"], q["jobs"]) for q in stats["queues"]] == [("runs", 1)]
    jobs = staff.get(reverse("django_rq:jobs", args=[0]))
    assert jobs.status_code == 200 and "mlbench_master.runs.jobs.run_job" in jobs.content.decode()


def test_admin_entry_points_lead_to_the_queues(staff, redis_settings):
    assert staff.get("/admin/")["Location"] == "/admin/rq/"
    assert staff.get("/admin/login/")["Location"] == "/admin/rq/"
    # The admin's own pages send whoever is signed out to the dashboard's sign-in, and back.
    r = Client().get("/admin/password_change/", follow=True)
    assert r.redirect_chain[-1] == ("/login/?next=/admin/password_change/", 302)
    assert staff.get("/admin/login/?next=/admin/password_change/")["Location"] == (
        "/admin/password_change/"
    )
    assert staff.get("/admin/login/?next=https://evil.example/")["Location"] == "/admin/rq/"
    assert staff.get("/admin/password_change/").status_code == 200
    # No model is registered with the admin: no page to edit users, tokens or runs.
    assert staff.get("/admin/auth/user/").status_code == 404
    assert staff.get("/admin/authtoken/token/").status_code == 404


def test_dashboard_links_the_queues_for_staff_only(staff, member):
    link = 'href="/admin/rq/"'
    assert link in staff.get("/runs/").content.decode()
    assert link not in member.get("/runs/").content.decode()


def test_staff_may_look_but_not_act(staff, redis_settings):
    from django_rq import get_queue

    from mlbench_master.urls import READ_ONLY

    job = get_queue("runs").enqueue("mlbench_master.runs.jobs.run_job", 0)
    # Each action django-rq offers is a POST; every one is refused and the job stays.
    for name, args in [
        ("clear", [0]),
        ("delete_job", [0, job.id]),
        ("stop_job", [0, job.id]),
        ("requeue_all", [0]),
        ("actions", [0]),
    ]:
        r = staff.post(reverse(f"django_rq:{name}", args=args), {"action": "delete"})
        assert r.status_code == 405, name
        assert r.content.decode() == READ_ONLY
    assert get_queue("runs").job_ids == [job.id]
    assert staff.get(reverse("django_rq:job_detail", args=[0, job.id])).status_code == 200
