"""A system check that says how to fix a dashboard without its browser libraries (uPlot is
installed by npm, not pip), instead of leaving pages that fail in the browser."""

from __future__ import annotations

from django.contrib.staticfiles import finders
from django.core.checks import Warning, register

REQUIRED = ["vendor/uplot/uPlot.iife.min.js", "vendor/uplot/uPlot.min.css"]


@register("staticfiles")
def vendor_assets(app_configs, **kwargs) -> list[Warning]:  # noqa: ANN001, ANN003
    missing = [path for path in REQUIRED if not finders.find(path)]
    if not missing:
        return []
    return [
        Warning(
            f"dashboard static files missing: {', '.join(missing)}",
            hint="run `npm ci` in the source tree (`make install` does), or set "
            "MLBENCH_NODE_MODULES to the node_modules folder that holds uplot",
            id="dashboard.W001",
        )
    ]
