"""What every page's template gets: the installation's name (its public key and the key's
fingerprint), so any page showing results says whose they are (docs/publishing.rst)."""

from __future__ import annotations

from django.http import HttpRequest

from mlbench_master.bundles import signing


def installation(request: HttpRequest) -> dict:
    return {"installation": signing.this_installation()}
