"""`python manage.py mlbench_login_link USERNAME [--base-url URL]`: print a one-time
dashboard sign-in link, e.g. for the admin of a master running in Kubernetes, where no
password was ever set."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from mlbench_master.dashboard.links import MAX_AGE, one_time_login_url


class Command(BaseCommand):
    help = "Print a link that signs USERNAME in to the dashboard once (created if missing)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument(
            "--base-url",
            default=settings.MLBENCH_MASTER_URL,
            help="where browsers reach the master (default: MLBENCH_MASTER_URL)",
        )

    def handle(self, *args: object, **options: object) -> None:
        url = one_time_login_url(str(options["username"]), str(options["base_url"]))
        self.stdout.write(url)
        self.stderr.write(f"valid once, for {MAX_AGE // 3600} hours")
