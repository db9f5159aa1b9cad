"""Where the files of bundles live on this master, one rule for the writer, the importer and
the run lifecycle (which removes an imported run's files with it)."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from mlbench_master import model_files


def bundle_file(digest: str) -> Path:
    """An imported bundle's file as its origin signed it (kept to export its runs again)."""
    return Path(settings.MLBENCH_HOME) / "bundles" / f"{digest}.zip"


def model_folder(run_id: int) -> Path:
    """A run's model and its audit: model_files.py's folder (one rule for where they are)."""
    return model_files.folder(run_id)
