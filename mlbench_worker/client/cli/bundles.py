"""`mlbench export` and `mlbench import`: results that leave one master as a signed bundle
and enter another (docs/publishing.rst).

Both are the API's: the master signs an export with its own key (which never leaves it)
and verifies an import before it stores anything; the command moves bytes and says what
happened. An export is written under a temporary name and renamed once it is whole, so a
download cut short leaves no file that looks like a bundle.
"""

from __future__ import annotations

import argparse
import os
import zipfile
from pathlib import Path
from typing import Any

from mlbench_worker.client.cli.formatting import plural
from mlbench_worker.client.cli.master import (
    EXIT_CONFLICT,
    EXIT_OK,
    EXIT_SERVER,
    EXIT_USAGE,
    CliError,
    Master,
)

TRANSFER_TIMEOUT = 3600.0  # a bundle of a long series is large; the master streams it
MANIFEST = "mlbench-bundle.json"


def add_parsers(sub: Any) -> None:
    export = sub.add_parser(
        "export", help="write ended runs or a series as one signed result bundle (zip)"
    )
    export.add_argument("runs", type=int, nargs="*", metavar="RUN")
    export.add_argument("--series", type=int, metavar="ID", help="a series and all its runs")
    export.add_argument(
        "--output",
        "-o",
        help="file to write (default mlbench-run-RUN-bundle.zip, mlbench-series-ID-bundle.zip)",
    )
    imported = sub.add_parser(
        "import", help="bring a result bundle into the master: verified, then stored read-only"
    )
    imported.add_argument("file", metavar="FILE")


def cmd_export(args: argparse.Namespace, master: Master) -> int:
    if bool(args.runs) == (args.series is not None):
        raise CliError("export: give RUN... or --series ID (one of the two)", EXIT_USAGE)
    params = None
    if args.series is not None:
        path, name = f"series/{args.series}/bundle/", f"mlbench-series-{args.series}-bundle.zip"
    elif len(args.runs) == 1:
        path, name = f"runs/{args.runs[0]}/bundle/", f"mlbench-run-{args.runs[0]}-bundle.zip"
    else:
        ids = ",".join(str(r) for r in args.runs)
        path, name, params = (
            "runs/bundle/",
            f"mlbench-runs-{ids.replace(',', '-')}-bundle.zip",
            {"runs": ids},
        )
    target = Path(args.output or name)
    try:
        response = master.call(
            "_submit", "GET", path, params=params or {}, stream=True, timeout=TRANSFER_TIMEOUT
        )
    except CliError as exc:
        raise _unended(exc, args) from None
    partial = target.with_name(f".{target.name}.part")
    size = 0
    try:
        with open(partial, "wb") as fh:
            for block in response.iter_content(256 * 1024):
                fh.write(block)
                size += len(block)
        manifest = _manifest(partial)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    origin = manifest.get("origin", {})
    carried = sum(len(c.get("runs", [])) for c in manifest.get("carried", []))
    print(
        f"wrote {target} ({plural(size, 'byte')}): "
        f"{plural(len(manifest.get('runs', [])), 'run')} of this master"
        + (
            f" and {plural(carried, 'imported run')} with their origin's signature"
            if carried
            else ""
        )
        + f", signed by installation {origin.get('fingerprint', '?')}"
    )
    return EXIT_OK


def _unended(exc: CliError, args: argparse.Namespace) -> CliError:
    """A 409 of an export is a run that has not ended. The generic advice to stop it with
    `mlbench delete RUN` would destroy what the user wants to export: the master's own
    words say what to do (wait, or cancel the series), and only a fallback is added."""
    if exc.code != EXIT_CONFLICT:
        return exc
    said = str(exc).split("; wait for it to end or stop it with")[0]
    if "export it again" not in said:  # a master that does not say it yet
        said += (
            f"; wait for series {args.series} to end, or cancel what is left of it "
            f"(mlbench series {args.series} --cancel), then export it again"
            if args.series is not None
            else "; wait for it to end, then export it again"
        )
    return CliError(said, EXIT_CONFLICT)


def _manifest(path: Path) -> dict[str, Any]:
    import json

    try:
        with zipfile.ZipFile(path) as zf:
            return json.loads(zf.read(MANIFEST))
    except (zipfile.BadZipFile, KeyError, ValueError, OSError) as exc:
        raise CliError(
            f"the download is not a whole bundle ({exc}): the master may have failed while "
            "sending it; see its log and try again",
            EXIT_SERVER,
        ) from None


def cmd_import(args: argparse.Namespace, master: Master) -> int:
    path = Path(args.file)
    if not path.is_file():
        raise CliError(f"no file {path}", EXIT_USAGE)
    try:
        with open(path, "rb") as fh:
            body = master.json(
                "_submit",
                "POST",
                "bundles/",
                data=fh,
                headers={"Content-Type": "application/zip"},
                timeout=TRANSFER_TIMEOUT,
            )
    except CliError as exc:
        if exc.code == EXIT_CONFLICT:  # not a run that is active: say only the master's words
            raise CliError(str(exc).split("; wait for it to end")[0], EXIT_CONFLICT) from None
        raise
    bundle = body["bundle"]
    own = body.get("file") or bundle  # a master before `file`: the stored bundle's
    line = (
        f"{path}: verified (SHA-256 {own['digest'][:16]}…, signed by installation "
        f"{own['origin']['fingerprint']})"
    )
    if own["digest"] != bundle["digest"]:  # exported again: the runs keep their origin's file
        line += (
            f", carrying the bundle installation {bundle['origin']['fingerprint']} signed "
            f"(SHA-256 {bundle['digest'][:16]}…)"
        )
    print(f"{line}; {plural(body['stored'], 'run')} stored")
    for run in body["runs"]:
        what = "stored, read-only" if run["new"] else "already here"
        print(
            f"  run {run['id']}: run {run['origin_run']} of installation {run['origin']} ({what})"
        )
    for series in body["series"]:
        print(f"  series {series}: mlbench series {series}")
    return EXIT_OK
