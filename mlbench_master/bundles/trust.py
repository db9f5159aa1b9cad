"""Whose signatures this installation trusts (docs/publishing.rst, "Whose results rank").

A valid signature proves that the holder of a key signed a bundle; it says nothing of who
that is. Anyone can make a key, re-sign a changed bundle with it and send it in. So an
imported run's result ranks on the board only when its origin's key is trusted here: this
installation's own key (always; it cannot be removed) and the keys an operator added
(`TrustedKey` rows: the public key, its fingerprint computed here by signing.py, a name,
who added it and when). Every other imported run is shown with its origin as an
"unverified origin" and ranked nowhere.

Trust is read from the table whenever a result is shown (`of_key`, `known`), never copied
onto the runs: adding a key ranks its runs at once and removing it unranks them, with
nothing to re-mark and nothing that can go stale. This module is the only writer of
`TrustedKey` rows (tests/test_table_owners.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction

from mlbench_master.api.models import TrustedKey
from mlbench_master.bundles import signing
from mlbench_master.common.dates import iso
from mlbench_master.runs import lifecycle

LOCAL, TRUSTED, UNVERIFIED = "local", "trusted", "unverified"
OWN_NAME = "this installation"
NAME_MAX = TrustedKey._meta.get_field("name").max_length
_FINGERPRINT = re.compile(r"^[0-9a-f]{4}(:?[0-9a-f]{4}){3}$")


class TrustRefused(ValueError):
    """A change of the trusted keys refused for what was given: `field` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field, self.message = field, message


class NoSuchKey(TrustRefused):
    """The fingerprint names no trusted key."""


class TrustUnchanged(TrustRefused):
    """Not possible as things are: this installation's own key, or one trusted already."""


@dataclass(frozen=True)
class Trust:
    """How far an origin is trusted here: LOCAL (this installation's own results), TRUSTED
    (its key is this installation's or an operator added it, as `name`) or UNVERIFIED."""

    status: str
    name: str = ""

    @property
    def trusted(self) -> bool:
        return self.status != UNVERIFIED

    @property
    def label(self) -> str:
        if self.status == TRUSTED:
            return f"trusted ({self.name})"
        return "unverified origin" if self.status == UNVERIFIED else LOCAL

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "trusted": self.trusted,
            "name": self.name or None,
            "label": self.label,
        }


def known() -> dict[str, str]:
    """Every trusted public key and its name, this installation's own first: one query, for
    a list of results (`of_key(key, known())`)."""
    names = {signing.this_installation().public_key: OWN_NAME}
    for key, name in TrustedKey.objects.values_list("public_key", "name"):
        names.setdefault(key, name)
    return names


def of_key(public_key: str, names: dict[str, str] | None = None) -> Trust:
    """The trust of an imported run whose origin signed with `public_key`."""
    names = known() if names is None else names
    name = names.get(public_key)
    return Trust(TRUSTED, name) if name is not None else Trust(UNVERIFIED)


def listed() -> list[dict[str, Any]]:
    """The trusted keys as the API and the pages show them: this installation's own first
    (`own`: it cannot be removed), then the operator's, oldest first."""
    me = signing.this_installation()
    own = {
        "public_key": me.public_key,
        "fingerprint": me.fingerprint,
        "name": OWN_NAME,
        "own": True,
        "added_by": None,
        "added_at": None,
    }
    return [own, *(as_json(row) for row in TrustedKey.objects.select_related("added_by"))]


def as_json(row: TrustedKey) -> dict[str, Any]:
    return {
        "public_key": row.public_key,
        "fingerprint": row.fingerprint,
        "name": row.name,
        "own": False,
        "added_by": row.added_by.get_username() if row.added_by_id else None,
        "added_at": iso(row.added_at),
    }


def add(key: Any, name: Any, user: Any) -> TrustedKey:
    """Trust `key` (an Ed25519 public key, base64) as `name`; TrustRefused naming the field.
    The fingerprint is computed here from the key."""
    if not isinstance(key, str):
        raise TrustRefused(
            "key", "give the installation's Ed25519 public key, base64, as its GET "
            "/api/installation/ or its Bundles page shows it",
        )  # fmt: skip
    try:
        public = signing.public_key_of(key)
    except ValueError as exc:
        raise TrustRefused(
            "key", f"not an Ed25519 public key: {exc} (give it in base64, 44 characters, as "
            "the origin's GET /api/installation/ shows it)",
        ) from None  # fmt: skip
    if not isinstance(name, str) or not name.strip():
        raise TrustRefused("name", "say whose key it is (a group, a person, a lab)")
    name = name.strip()
    if len(name) > NAME_MAX or "\x00" in name:
        raise TrustRefused("name", f"at most {NAME_MAX} characters of text")
    fingerprint = signing.fingerprint(public)
    if public == signing.this_installation().public_key:
        raise TrustUnchanged(
            "key", f"{fingerprint} is this installation's own key: it is always trusted"
        )
    try:
        with transaction.atomic():
            return TrustedKey.objects.create(
                public_key=public,
                fingerprint=fingerprint,
                name=name,
                added_by=lifecycle.creator(user),
            )
    except IntegrityError:
        pass
    there = TrustedKey.objects.filter(public_key=public).first()
    said = f" as {there.name!r} since {iso(there.added_at)[:10]}" if there else ""
    raise TrustUnchanged(
        "key", f"{fingerprint} is trusted already{said}; remove it first to rename it"
    )


def fingerprint_of(text: Any) -> str:
    """A fingerprint as a person may type it (any case, with or without its colons), in
    the form signing.fingerprint writes; TrustRefused naming `fingerprint` otherwise."""
    given = str(text).strip().lower()
    if not _FINGERPRINT.match(given):
        raise TrustRefused(
            "fingerprint",
            f"{given[:40]!r} is not a key's fingerprint: 16 hex digits, as 3f2a:91bc:07de:4411",
        )
    digits = given.replace(":", "")
    return ":".join(digits[i : i + 4] for i in range(0, 16, 4))


def remove(text: Any) -> dict[str, Any]:
    """Stop trusting the key with fingerprint `text`: its runs are unverified again at
    once (nothing is re-marked: trust is read from this table). The key as it was."""
    fingerprint = fingerprint_of(text)
    if fingerprint == signing.this_installation().fingerprint:
        raise TrustUnchanged(
            "fingerprint",
            f"{fingerprint} is this installation's own key: it is always trusted and cannot "
            "be removed",
        )
    row = TrustedKey.objects.select_related("added_by").filter(fingerprint=fingerprint).first()
    if row is None:
        raise NoSuchKey("fingerprint", f"no trusted key has the fingerprint {fingerprint}")
    gone = as_json(row)
    TrustedKey.objects.filter(pk=row.pk).delete()
    return gone
