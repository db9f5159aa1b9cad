"""`python -m mlbench_master.cluster.kubernetes.bootstrap`: the admin account of a helm install.

The chart generates an admin token and password at install (Secrets kept across upgrades)
and hands them to the master as MLBENCH_ADMIN_TOKEN / MLBENCH_ADMIN_PASSWORD. The master
pod's init step runs this after the migrations, so the account always matches the Secret:
the token for the API and the `mlbench` CLI, the password for the dashboard's sign-in.
"""

from __future__ import annotations

import os
import sys

ADMIN = "admin"


def ensure_admin(token: str, password: str, username: str = ADMIN) -> None:
    """Create or update `username` (superuser) so its API token and password are these."""
    from django.contrib.auth import get_user_model
    from django.db import transaction
    from rest_framework.authtoken.models import Token

    if len(token) < 20 or len(token) > 40:
        raise ValueError("MLBENCH_ADMIN_TOKEN must be 20 to 40 characters")
    User = get_user_model()
    with transaction.atomic():
        user, _ = User.objects.get_or_create(username=username)
        user.is_staff = user.is_superuser = True
        if password and not user.check_password(password):
            user.set_password(password)
        user.save()
        Token.objects.filter(user=user).exclude(key=token).delete()
        Token.objects.get_or_create(user=user, key=token)


def main() -> int:
    token = os.environ.get("MLBENCH_ADMIN_TOKEN", "")
    if not token:
        print("MLBENCH_ADMIN_TOKEN is not set: no admin account made", file=sys.stderr)
        return 0
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mlbench_master.settings")
    django.setup()
    ensure_admin(token, os.environ.get("MLBENCH_ADMIN_PASSWORD", ""))
    print(f"admin account {ADMIN!r} matches the release's Secret")
    return 0


if __name__ == "__main__":
    sys.exit(main())
