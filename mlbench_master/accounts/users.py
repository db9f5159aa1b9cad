"""The one writer of users and API tokens (tests/test_write_owners.py checks it).

The token command, the embedded launcher, the helm install's admin account and the
dashboard's one-time links all come through these functions; api/auth.py only reads them
to authenticate a request.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.hashers import make_password
from django.db import transaction
from rest_framework.authtoken.models import Token


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
