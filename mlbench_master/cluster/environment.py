"""A driver's settings: Django's when it is configured (the master), else the environment
(a bare driver in a test or a script). Empty values mean unset. One rule for both drivers.
"""

from __future__ import annotations

import os

from django.conf import settings


def setting(name: str) -> str | None:
    """The setting `name` as text, or None when it is unset or empty."""
    value = None
    try:
        if settings.configured:
            value = getattr(settings, name, None)
    except ImportError:  # pragma: no cover - django is a master dependency
        pass
    if value in (None, ""):
        value = os.environ.get(name)
    return None if value in (None, "") else str(value)
