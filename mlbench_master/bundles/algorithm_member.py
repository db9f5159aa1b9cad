"""An uploaded algorithm's source in a bundle: ``runs/<id>/algorithm.py`` beside the run.

Why in the bundle: a result rests on the code that produced it, and a run trained with an
outside algorithm names that code only by its SHA-256 (Run.algorithm_source). The member is
listed with its own SHA-256 in the signed manifest like every member; the importer checks
that it is the file the run names, reads its declaration as an upload's (never running
it) and stores it in this master's algorithm store (runs/algorithm_files.py), where pages,
the API and `mlbench download --algorithm` find it. A bundle from before the member, or of
a run without an outside algorithm, has none and imports as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from mlbench_master.api.models import Run
from mlbench_master.bundles import layout
from mlbench_master.bundles.reader import Verified
from mlbench_master.bundles.refusals import BundleRefused
from mlbench_master.grading import receive
from mlbench_master.runs import algorithm_files
from mlbench_worker.shared import algorithm_source

MEMBER = "algorithm.py"


def written(run: Run) -> Iterator[tuple[str, list[bytes]]]:
    """The member of `run`'s source, when it trained with an uploaded algorithm stored here."""
    source = algorithm_files.source(run.algorithm_source) if run.algorithm_source else None
    if source is not None:
        yield layout.run_folder(run.pk) + MEMBER, [source]


def stored(bundle: Verified, origin_run: int, fields: dict[str, Any]) -> None:
    """The run's source member, when the bundle has one, checked against the run's
    `algorithm_source` and stored here (BundleRefused, naming the member, otherwise)."""
    path = layout.run_folder(origin_run) + MEMBER
    if path not in bundle.run_members(origin_run):
        return  # an older bundle, or a run of a built-in algorithm: the hash alone stays
    source = bundle.read(path)
    named = fields.get("algorithm_source") or ""
    digest = algorithm_source.sha256(source)
    if digest != named:
        raise BundleRefused(
            f"member {path!r} has SHA-256 {digest[:12]}..., not the run's algorithm_source "
            f"{named[:12] or '(none)'}"
        )
    try:
        algorithm_files.store_bytes(source)
    except (algorithm_source.DeclarationError, receive.TooLarge) as exc:
        raise BundleRefused(f"member {path!r}: {exc}") from None
