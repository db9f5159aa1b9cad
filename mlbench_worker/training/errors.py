"""The one exception type the worker turns into a message and a non-zero exit code.

Anything a user can fix (a bad option, a missing data set, a checkpoint that does not fit)
raises `WorkerError` with a sentence that names the problem and the fix; the entry point
prints it without a traceback. Everything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class WorkerError(Exception):
    """A problem the user can fix; `exit_code` 2 means bad input, 1 a failed run."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code
