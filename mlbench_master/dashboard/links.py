"""One-time sign-in links for the local user.

The embedded launcher prints such a link so whoever started the master can open the dashboard
without a password. A link is single-use because it is bound to the user's `last_login`: signing
in moves `last_login`, which invalidates the signature. It also expires after `MAX_AGE` seconds.
No table is needed: the secret key signs the token.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core import signing
from django.urls import reverse

from mlbench_master.accounts.users import ensure_user

SALT = "mlbench.dashboard.one-time-login"
MAX_AGE = 24 * 3600


def _stamp(user: AbstractBaseUser) -> str:
    return user.last_login.isoformat() if user.last_login else ""


def make_token(user: AbstractBaseUser) -> str:
    """A signed token that signs `user` in once."""
    return signing.dumps({"u": user.pk, "l": _stamp(user)}, salt=SALT, compress=True)


def user_for_token(token: str) -> AbstractBaseUser | None:
    """The user the token belongs to, or None if it is forged, expired or already used."""
    try:
        data = signing.loads(token, salt=SALT, max_age=MAX_AGE)
    except signing.BadSignature:  # SignatureExpired is a subclass
        return None
    user = get_user_model().objects.filter(pk=data.get("u"), is_active=True).first()
    if user is None or _stamp(user) != data.get("l"):
        return None
    return user


def one_time_login_url(username: str, base_url: str) -> str:
    """The URL that signs `username` in once; a missing user is created as a plain user
    (no password, no staff rights: the launcher's admin exists already) by api/auth.py.

    `base_url` is where the browser reaches the master, e.g. "http://127.0.0.1:8000".
    """
    user = ensure_user(username)
    path = reverse("dashboard:login-once", kwargs={"token": make_token(user)})
    return base_url.rstrip("/") + path
