"""Who is calling: users (DRF tokens or dashboard sessions) and run workers (run tokens).

A worker token (see `lifecycle.worker_token`) authenticates as a `RunWorker`, not as a user:
it carries the one run it may write to, and `permissions.py` limits it to posting that
run's metrics and summary. User tokens are DRF authtoken keys.

Both kinds of token are also taken as the password of HTTP Basic: the original platform's
client has no credentials option, and the only way to give it any is its `url`
("alice:TOKEN@host:port"), from which `requests` sends Basic. No account password is
ever checked over the API: a token is revocable and never typed into the dashboard.

Users and tokens are created and changed in mlbench_master/accounts/users.py, not here:
the token command, the embedded launcher and the dashboard's links need them without HTTP.
"""

from __future__ import annotations

import base64
import binascii

from django.conf import settings
from rest_framework import authentication, exceptions

from mlbench_master.api.models import Run
from mlbench_master.runs import lifecycle
from mlbench_master.runs.frozen import ended_past_grace


class RunWorker:
    """The principal of a request made with a run's worker token."""

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False
    pk = None
    id = None

    def __init__(self, run: Run) -> None:
        self.run = run
        self.username = f"run-{run.pk}-worker"

    def __str__(self) -> str:
        return self.username


def _token_from_header(request) -> str | None:  # noqa: ANN001
    parts = authentication.get_authorization_header(request).split()
    if not parts or parts[0].lower() not in (b"token", b"bearer"):
        return None
    if len(parts) != 2:
        raise exceptions.AuthenticationFailed(
            "Authorization header must be 'Token <key>' (one key, no spaces)"
        )
    try:
        return parts[1].decode()
    except UnicodeError as exc:
        raise exceptions.AuthenticationFailed("the token contains invalid characters") from exc


def challenge(request) -> str:  # noqa: ANN001
    """The WWW-Authenticate value of a 401: both ways to send a token, to scripts.

    Browsers (they send `Sec-Fetch-*` headers) are never offered Basic: a browser that
    was given Basic credentials once attaches them to every later request to this host,
    cross-site form posts included, and would pop its password dialog over the
    dashboard, which signs in with its own page.
    """
    if any(name.startswith("HTTP_SEC_FETCH_") for name in request.META):
        return 'Token realm="mlbench"'
    return 'Token realm="mlbench", Basic realm="mlbench", charset="UTF-8"'


def _cross_site(request) -> str | None:  # noqa: ANN001
    """Why an unsafe request looks sent by another site's page, or None.

    Basic credentials are attached by a browser by itself, like a cookie, so a write
    authenticated by them gets the check Django's CSRF protection gives sessions: the
    browser's own statement of where the request comes from. Scripts (`requests`, curl)
    send neither header and pass.
    """
    site = request.META.get("HTTP_SEC_FETCH_SITE")
    if site is not None and site not in ("same-origin", "none"):
        return f"Sec-Fetch-Site is {site!r}"
    origin = request.META.get("HTTP_ORIGIN")
    if origin is not None:
        own = f"{request.scheme}://{request.get_host()}"
        if origin != own and origin not in settings.CSRF_TRUSTED_ORIGINS:
            return f"Origin {origin!r} is not this master ({own}) nor in CSRF_TRUSTED_ORIGINS"
    return None


def _worker(key: str) -> tuple[RunWorker, Run]:
    run = lifecycle.run_for_token(key)
    if run is None:
        raise exceptions.AuthenticationFailed("invalid worker token")
    if ended_past_grace(run):
        raise exceptions.AuthenticationFailed(
            f"the worker token of run {run.pk} expired: the run ended at "
            f"{run.finished_at.isoformat()}, more than MLBENCH_RUN_TOKEN_GRACE "
            f"({settings.MLBENCH_RUN_TOKEN_GRACE}) seconds ago"
        )
    return RunWorker(run), run


class RunTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Token mlbr_<run>_<hmac>`: the worker token of one run."""

    keyword = "Token"

    def authenticate(self, request):  # noqa: ANN001, ANN201
        key = _token_from_header(request)
        if key is None or not lifecycle.is_worker_token(key):
            return None
        return _worker(key)

    def authenticate_header(self, request) -> str:  # noqa: ANN001
        return challenge(request)


class UserTokenAuthentication(authentication.TokenAuthentication):
    """DRF's token authentication, also accepting the `Bearer` keyword."""

    def authenticate(self, request):  # noqa: ANN001, ANN201
        key = _token_from_header(request)
        if key is None:
            return None
        return self.authenticate_credentials(key)


class TokenBasicAuthentication(authentication.BaseAuthentication):
    """`Authorization: Basic base64(user:TOKEN)`: a user's API token as the password.

    The user name must be the token's owner (for a worker token: `run-<id>-worker`, as
    `RunWorker` names itself, or empty), so a token pasted under the wrong name is refused
    instead of quietly acting as someone else.
    """

    def authenticate(self, request):  # noqa: ANN001, ANN201
        parts = authentication.get_authorization_header(request).split()
        if not parts or parts[0].lower() != b"basic":
            return None
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed(
                "Authorization header must be 'Basic <base64 of user:token>'"
            )
        try:
            raw = base64.b64decode(parts[1], validate=True)
        except binascii.Error:
            raise exceptions.AuthenticationFailed(
                "the Basic credentials are not base64 of 'user:token'"
            ) from None
        try:
            text = raw.decode()
        except UnicodeError:  # requests encodes the user name in Latin-1
            text = raw.decode("latin-1")
        username, sep, key = text.partition(":")
        if not sep or not key:
            raise exceptions.AuthenticationFailed(
                "Basic credentials need the API token as the password: user:TOKEN"
            )
        if request.method not in ("GET", "HEAD", "OPTIONS"):
            why = _cross_site(request)
            if why:
                raise exceptions.PermissionDenied(
                    f"a write with Basic credentials from another site's page is refused ({why})"
                )
        if lifecycle.is_worker_token(key):
            worker, run = _worker(key)
            if username not in ("", worker.username):
                raise exceptions.AuthenticationFailed(
                    f"this is the worker token of run {run.pk}: its user name is "
                    f"{worker.username!r}"
                )
            return worker, run
        user, token = UserTokenAuthentication().authenticate_credentials(key)
        if username != user.get_username():
            raise exceptions.AuthenticationFailed(
                f"the token does not belong to user {username!r}: use its owner's name"
            )
        return user, token

    def authenticate_header(self, request) -> str:  # noqa: ANN001
        return challenge(request)
