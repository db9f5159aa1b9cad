"""`python manage.py mlbench_token USERNAME [--create-user] [--superuser]`: print the
user's API token (made when missing), for `Authorization: Token <it>`."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from mlbench_master.accounts.users import issue_user_token


class Command(BaseCommand):
    help = "Print the API token of a user (created with --create-user)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument(
            "--create-user", action="store_true", help="create the user when it does not exist"
        )
        parser.add_argument(
            "--superuser", action="store_true", help="make the user staff and superuser"
        )

    def handle(self, *args: object, **options: object) -> None:
        try:
            token = issue_user_token(
                str(options["username"]),
                create_user=bool(options["create_user"]),
                superuser=bool(options["superuser"]),
            )
        except get_user_model().DoesNotExist as exc:
            raise CommandError(
                f"{exc.args[0].split(';')[0]}; add --create-user to create it"
            ) from exc
        self.stdout.write(token)
