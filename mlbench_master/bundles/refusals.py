"""The ways a bundle is refused, apart from the modules that raise them so the API's
error mapping (api/errors.py) can name them without importing the writer or the reader."""

from __future__ import annotations


class BundleRefused(Exception):
    """A bundle that is not imported for what it holds, and why."""


class AlreadyHere(BundleRefused):
    """A bundle this master cannot take for another reason than its content: it holds runs
    of this installation, here already as its own."""


class NotExportable(Exception):
    """Runs that cannot travel (still running, missing files); the API answers 409."""
