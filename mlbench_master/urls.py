"""URL routes of the master."""

from collections.abc import Callable
from functools import wraps

from django.contrib import admin
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse
from django.shortcuts import redirect
from django.templatetags.static import static
from django.urls import include, path, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views import defaults
from django.views.generic import RedirectView
from django_rq.urls import get_admin_urlpatterns, get_api_urlpatterns

from mlbench_master.api.health import health


def _refuse_non_staff(request: HttpRequest, next_url: str) -> HttpResponse | None:
    """Signed out: to the dashboard's sign-in page (LOGIN_URL); signed in, not staff: 403."""
    user = request.user
    if not user.is_authenticated:
        return redirect_to_login(next_url)
    if not (user.is_active and user.is_staff):
        raise PermissionDenied
    return None


READ_ONLY = (
    "the queue pages only show the queue: a run's job is started, stopped and removed with "
    "the run itself (dashboard, API or mlbench command), never here"
)


def staff_only(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """`view` for staff, to read only; everyone else is sent to sign in or refused.

    django-rq's pages also offer actions (empty a queue, stop or delete a job), all by POST.
    They are refused: emptying the queue or stopping the job of a run would leave the run
    STARTED with nobody watching it; runs.py is where a run's job is started and stopped.
    """

    @wraps(view)
    def wrapped(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        refused = _refuse_non_staff(request, request.get_full_path())
        if refused is not None:
            return refused
        if request.method not in ("GET", "HEAD"):
            return HttpResponseNotAllowed(["GET", "HEAD"], content=READ_ONLY)
        return view(request, *args, **kwargs)

    return wrapped


def admin_login(request: HttpRequest) -> HttpResponse:
    """The admin's sign-in page is the dashboard's: one sign-in page for the whole master."""
    next_url = request.GET.get("next", "")
    if not url_has_allowed_host_and_scheme(
        next_url, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        next_url = reverse("django_rq:home")
    return _refuse_non_staff(request, next_url) or redirect(next_url)


# django-rq's queue statistics (its documented standalone URLs), staff only. Its pages are
# drawn in the Django admin's frame, which links to the admin's home, sign-in, sign-out and
# password pages: those come from admin.site below, which has no model registered.
rq_urls = get_api_urlpatterns() + get_admin_urlpatterns(view_wrapper=staff_only)
admin.site.site_header = admin.site.site_title = "mlbench"
admin.site.index_title = "Queues"

urlpatterns: list = [
    # Liveness/readiness of this master (the helm chart's probes); not part of the REST API.
    path("api/health/", health, name="health"),
    # The REST API, its OpenAPI schema (/api/schema/) and docs (/api/docs/).
    path("api/", include("mlbench_master.api.urls")),
    # RQ queues, workers and jobs for staff (django-rq): /admin/rq/.
    path("admin/rq/", include((rq_urls, "django_rq"))),
    path("admin/", RedirectView.as_view(pattern_name="django_rq:home")),
    path("admin/login/", admin_login),
    path("admin/", admin.site.urls),
    # Browsers ask every page's site for /favicon.ico; the admin's (queue) pages name no
    # icon of their own, so without this each of them logged a 404.
    path("favicon.ico", RedirectView.as_view(url=static("dashboard/favicon.svg"), permanent=True)),
    # The dashboard's pages (/, /runs/, /compare/, /login/ ...); they read data from /api/.
    path("", include("mlbench_master.dashboard.urls")),
]


def _json_under_api(status: int, detail: str, page: Callable[..., HttpResponse]):  # noqa: ANN202
    """Django's error page, except under /api/ where clients read JSON."""

    def handler(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if request.path.startswith("/api/"):
            return JsonResponse({"detail": detail}, status=status)
        return page(request, *args, **kwargs)

    return handler


# Errors raised outside the REST views (a failing middleware, a view outside DRF).
handler404 = _json_under_api(404, "not found", defaults.page_not_found)
handler500 = _json_under_api(
    500, "internal error: the master's log has the details", defaults.server_error
)
handler400 = _json_under_api(400, "bad request", defaults.bad_request)
handler403 = _json_under_api(403, "forbidden", defaults.permission_denied)
