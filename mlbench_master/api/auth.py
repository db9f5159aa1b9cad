"""Who is calling: users (DRF tokens or dashboard sessions) and run workers (run tokens).

A worker token (see `lifecycle.worker_token`) authenticates as a `RunWorker`, not as a user:
it carries the one run it may write to, and `permissions.py` limits it to posting that
run's metrics and summary. User tokens are DRF authtoken keys.

Both kinds of token are also taken as the password of HTTP Basic: the original platform's
client has no credentials option, and the only way to give it any is its `url`
("alice:TOKEN@host:port"), from which `requests` sends Basic. No account password is
ever checked over the API: a token is revocable and never typed into the dashboard.

This is also the one module that creates or changes users and tokens (`ensure_user`,
`ensure_user_token`, `issue_user_token` at the end), whoever asks for them.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.hashers import make_password
from django.db import transaction
from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.authtoken.models import Token

from mlbench_master.api.models import Run
from mlbench_master.runs import lifecycle


def ended_past_grace(run: Run) -> bool:
    """Whether `run` ended more than MLBENCH_RUN_TOKEN_GRACE seconds ago.

    Results still arrive for a short while after mpirun exits (the last metric batches,
    rank 0's summary); after that window a run's record is final. One rule for both the
    worker token's expiry and the summary endpoint. A run that has not ended (no
    `finished_at`) is open.
    """
    if run.finished_at is None:
        return False
    grace = dt.timedelta(seconds=settings.MLBENCH_RUN_TOKEN_GRACE)
    return timezone.now() - run.finished_at > grace


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


# --------------------------------------------------------------------------- the only writer
# Users and API tokens are created and changed here and nowhere else (tests/test_write_owners.py
# checks it): the token command, the embedded launcher, the helm install's admin account and
# the dashboard's one-time links all come through these functions.


def ensure_user(
    username: str, *, superuser: bool = False, password: str | None = None
) -> AbstractBaseUser:
    """The user `username`, created when missing with no usable password.

    `superuser` makes it staff and superuser (it never takes those rights away); a
    `password` is set unless it is already the user's (one hash check, no write then).
    """
    User = get_user_model()
    user, _ = User.objects.get_or_create(
        **{User.USERNAME_FIELD: username}, defaults={"password": make_password(None)}
    )
    changed = []
    if superuser and not (user.is_superuser and user.is_staff):
        user.is_superuser = user.is_staff = True
        changed += ["is_superuser", "is_staff"]
    if password and not user.check_password(password):
        user.set_password(password)
        changed.append("password")
    if changed:
        user.save(update_fields=changed)
    return user


def ensure_user_token(
    username: str,
    *,
    key: str | None = None,
    superuser: bool = False,
    password: str | None = None,
) -> str:
    """The API token of `username`; the user (see `ensure_user`) and the token are made
    when missing. With `key` the user's token is exactly `key`: any other token of the
    user is deleted (the helm install's admin follows the key in its Secret)."""
    with transaction.atomic():
        user = ensure_user(username, superuser=superuser, password=password)
        if key is None:
            token, _ = Token.objects.get_or_create(user=user)
        else:
            Token.objects.filter(user=user).exclude(key=key).delete()
            token, _ = Token.objects.get_or_create(user=user, key=key)
    return token.key


def issue_user_token(username: str, *, create_user: bool = False, superuser: bool = False) -> str:
    """The API token of `username` (made when missing); used by the CLI command and the
    embedded launcher. With `create_user` the user is created (no usable password)."""
    User = get_user_model()
    if not create_user and not User.objects.filter(**{User.USERNAME_FIELD: username}).exists():
        raise User.DoesNotExist(
            f"no user {username!r}; pass create_user=True (--create-user) to make one"
        )
    return ensure_user_token(username, superuser=superuser)
