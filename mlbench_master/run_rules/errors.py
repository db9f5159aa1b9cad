"""The ways a request for a run can break a rule, as exceptions the API maps to status
codes (400 naming the fields, 403), and the collector of messages per field."""

from __future__ import annotations


class RunRefused(ValueError):
    """The request breaks a rule (the API answers 400 with `errors`: field -> messages)."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{f}: {m[0]}" for f, m in errors.items()))


class StaffOnly(PermissionError):
    """A field only staff users may set (the API answers 403)."""


class ResumeRefused(ValueError):
    """The checkpoint asked for cannot be continued (400 naming `resume_from`)."""


class Errors(dict):
    """Messages per field, in the order found: every broken rule is said at once."""

    def add(self, field: str, message: str) -> None:
        self.setdefault(field, []).append(message)
