"""Dashboard pages. Views only render templates: every piece of data is fetched by the page's
JavaScript from the REST API, so the dashboard shows exactly what API clients see. The one
thing pages carry with them is the task catalogue (tasks.py): how each task is named and
what its throughput counts, and the metric points' declarations
(mlbench_worker/shared/metric_points.py): which names the scripts may read, which is code,
not data of a run."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.views import redirect_to_login
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET

from mlbench_worker.shared import metric_points

from . import forms_spec
from .links import user_for_token
from .tasks import task_catalogue


def _public_read() -> bool:
    return bool(getattr(settings, "MLBENCH_PUBLIC_READ", False))


def _page(request: HttpRequest, template: str, context: dict | None = None) -> HttpResponse:
    """Render a page, sending anonymous visitors to sign in unless reads are public."""
    if not request.user.is_authenticated and not _public_read():
        return redirect_to_login(request.get_full_path())
    # Every page gets the task catalogue (the scripts read each task's units from it) and
    # the metric points' declarations (static/dashboard/js/metric_points.js reads names there).
    ctx = {
        "can_write": request.user.is_authenticated,
        "tasks": task_catalogue(),
        "metric_points": metric_points.served(),
    }
    ctx.update(context or {})
    return render(request, f"dashboard/{template}", ctx)


@require_GET
def workers(request: HttpRequest) -> HttpResponse:
    return _page(request, "workers.html", {"nav": "workers"})


@require_GET
def worker_detail(request: HttpRequest, name: str) -> HttpResponse:
    return _page(request, "worker_detail.html", {"nav": "workers", "pod_name": name})


@require_GET
def runs(request: HttpRequest) -> HttpResponse:
    return _page(request, "runs.html", {"nav": "runs", "form": forms_spec.run_form_spec()})


# The charts the results API draws as files (/api/runs|series/<id>/plots/<chart>.png|svg).
RUN_CHARTS = [("accuracy", "Accuracy against time"), ("time-split", "Where the time goes")]
SERIES_CHARTS = [
    ("accuracy", "Accuracy against time, every seed with the band"),
    ("speedup", "Speed-up against workers"),
    ("time-split", "Where the time goes, per worker count"),
    ("cost", "Cost to target and price index against workers"),
]


@require_GET
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    context = {"nav": "runs", "run_id": run_id, "result_charts": RUN_CHARTS}
    return _page(request, "run_detail.html", context)


@require_GET
def series_list(request: HttpRequest) -> HttpResponse:
    return _page(request, "series.html", {"nav": "series"})


@require_GET
def series_detail(request: HttpRequest, series_id: int) -> HttpResponse:
    context = {"nav": "series", "series_id": series_id, "result_charts": SERIES_CHARTS}
    return _page(request, "series_detail.html", context)


@require_GET
def studies(request: HttpRequest) -> HttpResponse:
    """Algorithm studies, newest first (studies.js, from GET /api/studies/)."""
    return _page(request, "studies.html", {"nav": "studies"})


@require_GET
def study_detail(request: HttpRequest, study_id: int) -> HttpResponse:
    """One study: its times to target, score, held-out gate and performance profiles, as
    GET /api/studies/<id>/ answers them (study_detail.js draws them, computes none)."""
    return _page(request, "study_detail.html", {"nav": "studies", "study_id": study_id})


@require_GET
def bundles(request: HttpRequest) -> HttpResponse:
    """Result bundles: this installation's key, the upload of a bundle (POST /api/bundles/
    from the page's script, so the API's checks are the only ones), the bundles imported."""
    return _page(request, "bundles.html", {"nav": "bundles"})


@require_GET
def trust(request: HttpRequest) -> HttpResponse:
    """The keys whose imported results rank here: this installation's own and those staff
    added (listed, added and removed by the page's script through /api/trust/)."""
    return _page(request, "trust.html", {"nav": "trust"})


@require_GET
def board(request: HttpRequest, task: str | None = None) -> HttpResponse:
    """The results board: the task list, or one task's board (drawn by board.js from
    GET /api/results/, so the page ranks and filters nothing itself)."""
    if task is not None and task not in task_catalogue():
        raise Http404(f"no task {task!r}")
    return _page(request, "board.html", {"nav": "board", "task": task})


@require_GET
def compare(request: HttpRequest) -> HttpResponse:
    return _page(request, "compare.html", {"nav": "compare"})


@require_GET
def prices(request: HttpRequest) -> HttpResponse:
    return _page(request, "prices.html", {"nav": "prices"})


@require_GET
def login_once(request: HttpRequest, token: str) -> HttpResponse:
    """Consume a one-time sign-in link (see links.py)."""
    user = user_for_token(token)
    if user is None:
        messages.error(request, "This sign-in link is invalid, expired or was already used.")
        return redirect("dashboard:login")
    login(request, user, backend="django.contrib.auth.backends.ModelBackend")
    return redirect("dashboard:workers")
