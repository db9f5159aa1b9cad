"""`mlbench trust add|list|remove`: the installations whose imported results rank on this
master's board (docs/publishing.rst, "Whose results rank"), and how `mlbench show` says
where a run comes from.

All of it is the API's (`/api/trust/`): the master checks a key, computes its fingerprint
and decides what ranks; the command says what it did. `remove` takes a key or a
fingerprint: it finds the one the master lists, so the rule that makes a fingerprint stays
the master's.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from mlbench_worker.client.cli.formatting import Column, View, fit, plural, view_options
from mlbench_worker.client.cli.master import (
    EXIT_CONFLICT,
    EXIT_NOT_FOUND,
    EXIT_OK,
    CliError,
    Master,
)


def add_parser(sub: Any) -> None:
    trust = sub.add_parser(
        "trust", help="the installations whose imported results rank here: add, list, remove"
    )
    verbs = trust.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True
    add = verbs.add_parser("add", help="trust an installation's key (staff): its results rank")
    add.add_argument("key", metavar="KEY", help="its Ed25519 public key, base64")
    add.add_argument("--name", required=True, help="whose key it is (a group, a lab)")
    add.add_argument("--json", action="store_true", help="print the master's answer as JSON")
    listed = verbs.add_parser("list", help="the trusted keys, this installation's own first")
    view_options(listed, "print them as JSON")
    remove = verbs.add_parser(
        "remove", help="stop trusting a key (staff): its imported results are unranked again"
    )
    remove.add_argument("key", metavar="KEY_OR_FINGERPRINT")
    remove.add_argument("--json", action="store_true", help="print the master's answer as JSON")


def cmd_trust(args: argparse.Namespace, master: Master) -> int:
    return {"add": _add, "list": _list, "remove": _remove}[args.verb](args, master)


def _said(exc: CliError) -> CliError:
    """A 409 in the master's own words (not the run-conflict advice of master.py)."""
    if exc.code == EXIT_CONFLICT:
        return CliError(str(exc).split("; wait for it to end")[0], EXIT_CONFLICT)
    return exc


def _add(args: argparse.Namespace, master: Master) -> int:
    try:
        key = master.json("_submit", "POST", "trust/", json={"key": args.key, "name": args.name})
    except CliError as exc:
        raise _said(exc) from None
    if args.json:
        print(json.dumps(key, indent=2, sort_keys=True))
        return EXIT_OK
    print(
        f"trusted {key['fingerprint']} as {key['name']!r}: its imported runs "
        f"({plural(key['runs'], 'run')} here) rank on the board from now on (where this "
        "master's evaluator agrees with their grades)"
    )
    return EXIT_OK


def _list(args: argparse.Namespace, master: Master) -> int:
    keys = master.json("_submit", "GET", "trust/")
    if args.json:
        print(json.dumps(keys, indent=2, sort_keys=True))
        return EXIT_OK
    print(fit(KEY_COLUMNS, keys, View.of(args)))
    return EXIT_OK


# The trusted keys: the fingerprint names a key (`mlbench trust remove` takes it); the key
# itself with --wide.
KEY_COLUMNS = [
    Column("FINGERPRINT", lambda k: k["fingerprint"]),
    Column(
        "NAME",
        lambda k: " ".join(k["name"].split()) + (" (own key, always trusted)" if k["own"] else ""),
        most=48,
        least=16,
    ),
    Column("RUNS", lambda k: k.get("runs", 0)),
    Column("ADDED BY", lambda k: k.get("added_by") or "-", most=20, least=8, drop=2),
    Column("ADDED", lambda k: (k.get("added_at") or "-")[:10], drop=1),
    Column("PUBLIC KEY", lambda k: k["public_key"], wide=True),
]


def _remove(args: argparse.Namespace, master: Master) -> int:
    given = args.key.strip()
    keys = master.json("_submit", "GET", "trust/")
    plain = given.replace(":", "").lower()
    found = next(
        (k for k in keys if k["public_key"] == given or k["fingerprint"].replace(":", "") == plain),
        None,
    )
    if found is None:
        raise CliError(
            f"no trusted key is {given!r} (by its key or fingerprint): see `mlbench trust list`",
            EXIT_NOT_FOUND,
        )
    try:
        gone = master.json("_submit", "DELETE", f"trust/{found['fingerprint']}/")
    except CliError as exc:
        raise _said(exc) from None
    if args.json:
        print(json.dumps(gone, indent=2, sort_keys=True))
        return EXIT_OK
    print(
        f"no longer trusted: {gone['fingerprint']} ({gone['name']}); its imported runs "
        f"({plural(gone['runs'], 'run')} here) are unverified again and rank nowhere"
    )
    return EXIT_OK


def origin_lines(run: dict[str, Any]) -> list[tuple[str, str]]:
    """Where a run comes from, for `mlbench show`: nothing for this installation's own; for
    an imported run its origin with this installation's trust in it, and what this master's
    evaluator said of its grades."""
    origin = run.get("origin")
    if not isinstance(origin, dict):
        return []
    said = (origin.get("trust") or {}).get("label") or "unverified origin"
    lines = [
        (
            "origin",
            f"imported: run {origin.get('origin_run')} of installation "
            f"{origin.get('fingerprint')}, {said}"
            + ("" if said != "unverified origin" else " (not ranked: see `mlbench trust`)"),
        )
    ]
    regrade = origin.get("regrade") or {}
    status = regrade.get("status")
    if status == "re-graded":
        off = [s for s in regrade.get("steps") or [] if s.get("agrees") is False]
        if off:
            parts = [
                f"step {s['step']}: "
                + (
                    f"refused here ({s['refused']})"
                    if s.get("refused")
                    else f"origin {_grade(s.get('origin'))}, here {_grade(s.get('here'))}"
                )
                for s in off
            ]
            lines.append(("re-graded", "disputed: " + "; ".join(parts)))
        else:
            lines.append(("re-graded", "this master's evaluator agrees with the origin's grades"))
    elif status:
        lines.append(("re-graded", f"not re-graded here: {regrade.get('why') or status}"))
    return lines


def _grade(grades: Any) -> str:
    if not isinstance(grades, dict) or not grades:
        return "none"
    return ", ".join(f"{v:.6g}" if isinstance(v, int | float) else str(v) for v in grades.values())
