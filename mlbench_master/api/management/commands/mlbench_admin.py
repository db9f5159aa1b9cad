"""`django-admin mlbench_admin`: the admin account of a helm install.

The chart generates an admin token and password at install (Secrets kept across upgrades)
and hands them to the master as MLBENCH_ADMIN_TOKEN / MLBENCH_ADMIN_PASSWORD. The master
pod's init step (scripts/k8s/master-entrypoint.sh migrate) runs this after the migrations,
so the account always matches the Secret: the token for the API and the `mlbench` CLI, the
password for the dashboard's sign-in. The account itself is written by api/auth.py.
"""

from __future__ import annotations

import os

from django.core.management.base import BaseCommand

from mlbench_master.accounts.users import ensure_user_token

ADMIN = "admin"


def ensure_admin(token: str, password: str, username: str = ADMIN) -> None:
    """Create or update `username` (superuser) so its API token and password are these."""
    if len(token) < 20 or len(token) > 40:
        raise ValueError("MLBENCH_ADMIN_TOKEN must be 20 to 40 characters")
    ensure_user_token(username, key=token, superuser=True, password=password or None)


class Command(BaseCommand):
    help = "Make the admin account match MLBENCH_ADMIN_TOKEN and MLBENCH_ADMIN_PASSWORD."

    def handle(self, *args: object, **options: object) -> None:
        token = os.environ.get("MLBENCH_ADMIN_TOKEN", "")
        if not token:
            self.stderr.write("MLBENCH_ADMIN_TOKEN is not set: no admin account made")
            return
        ensure_admin(token, os.environ.get("MLBENCH_ADMIN_PASSWORD", ""))
        self.stdout.write(f"admin account {ADMIN!r} matches the release's Secret")
