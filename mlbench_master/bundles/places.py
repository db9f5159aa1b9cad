"""Where the files of bundles live on this master, one rule for the writer, the importer and
the run lifecycle (which removes an imported run's files with it). A run's model folder is
model_files.folder's."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings


def bundle_file(digest: str) -> Path:
    """An imported bundle's file as its origin signed it (kept to export its runs again)."""
    return Path(settings.MLBENCH_HOME) / "bundles" / f"{digest}.zip"
