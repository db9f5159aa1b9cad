"""Verification of a bundle, before anything of it is written anywhere.

In this order, each refusal a `BundleRefused` naming the member or the signature: the file
is a zip; every entry's path is plain and stays inside (layout.check_path), is a regular
file stored or deflated (a folder's empty entry, which `zip -r` adds, is checked the same
way and then left out), and unpacks within the limits (MLBENCH_BUNDLE_MAX_UNPACKED_BYTES in
all, layout.MAX_RATIO times its packed size each: a zip bomb is refused by its headers,
and no entry is ever read past the size it declares); the manifest is there, of this
format and of a version this master reads; its signature verifies with the public key it
names; the members it lists are exactly the entries (none missing, none added) and each
has the listed size and SHA-256; every run has its files. A carried bundle (another
installation's, inside this one) is then verified the same way, and may carry none itself.
Whatever the bytes, nothing but a BundleRefused leaves this module: a member that cannot be
read (damaged compressed data, data ending before its declared size, a CRC that does not
match, a header the zip module does not take) is refused naming it (`damage`).

The key a bundle names is whoever exported it: a valid signature proves the manifest, and
through its digests every member, is what that key signed. Whether to trust the key is the
reader's decision; the fingerprint is shown with every imported run for that.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import stat
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from django.conf import settings

from mlbench_master.bundles import layout, signing
from mlbench_master.bundles.refusals import BundleRefused

CHUNK = 1024 * 1024


@dataclass
class Carried:
    bundle: Verified
    runs: list[int]
    series: int | None


@dataclass
class Verified:
    """A bundle whose every check passed: open its members with `open`."""

    path: Path
    digest: str  # SHA-256 of the file
    zip: zipfile.ZipFile
    manifest: dict[str, Any]
    origin: signing.Installation
    members: dict[str, dict[str, Any]]
    runs: list[int]
    series: int | None
    carried: list[Carried] = field(default_factory=list)
    study: int | None = None  # a study bundle's study (its id at the origin)

    def open(self, path: str) -> IO[bytes]:
        return self.zip.open(path)

    def read(self, path: str) -> bytes:
        with self.open(path) as fh:
            return fh.read()

    def run_members(self, run_id: int) -> list[str]:
        prefix = layout.run_folder(run_id)
        return sorted(p for p in self.members if p.startswith(prefix))


@contextlib.contextmanager
def opened(path: Path) -> Iterator[Verified]:
    """`path` verified (BundleRefused otherwise), its carried bundles too; the temporary
    copies of carried bundles are removed on leaving."""
    with (
        tempfile.TemporaryDirectory(prefix="mlbench-bundle-") as work,
        contextlib.ExitStack() as stack,
    ):
        yield _verify(Path(path), Path(work), stack, nested=False)


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _verify(path: Path, work: Path, stack: contextlib.ExitStack, nested: bool) -> Verified:
    where = "it" if nested else "the file"  # nested: _carried names the member first
    try:
        archive = stack.enter_context(zipfile.ZipFile(path))
        infos = archive.infolist()
    except Exception as exc:  # BadZipFile, NotImplementedError (a zip version), OSError...
        raise BundleRefused(
            f"{where} is not a zip archive ({_said(exc)}); a result bundle is the zip file "
            "that `mlbench export` writes"
        ) from None
    entries = _check_entries(infos)
    manifest_bytes = _small(archive, entries, layout.MANIFEST, layout.MAX_MANIFEST_BYTES)
    manifest = _manifest(manifest_bytes)
    origin = _origin(manifest)
    signature = _small(archive, entries, layout.SIGNATURE, 4096)
    if not signing.verify(origin.public_key, signature.decode("ascii", "replace"), manifest_bytes):
        raise BundleRefused(
            f"the signature ({layout.SIGNATURE}) does not verify with the key the manifest "
            f"names (installation {origin.fingerprint}): the manifest was changed after it "
            "was signed, or another key signed it"
        )
    members = _members(manifest, entries)
    runs, series = _runs(manifest, members)
    study = _study(manifest, members)
    for path_, listed in members.items():
        _check_member(archive, path_, listed)
    verified = Verified(path, file_digest(path), archive, manifest, origin, members, runs, series)
    verified.study = study
    verified.carried = _carried(verified, work, stack, nested)
    return verified


def _check_entries(infos: list[zipfile.ZipInfo]) -> dict[str, zipfile.ZipInfo]:
    cap = int(settings.MLBENCH_BUNDLE_MAX_UNPACKED_BYTES)
    entries: dict[str, zipfile.ZipInfo] = {}
    folders: set[str] = set()
    total = 0
    for info in infos:
        name = info.filename
        if info.is_dir():  # `zip -r` lists each folder: checked as a path, then left out
            _folder_entry(info, folders)
            continue
        try:
            layout.check_path(name)
        except layout.BadPath as exc:
            raise BundleRefused(str(exc)) from None
        if name in entries:
            raise BundleRefused(f"member {name!r} is in the file twice")
        kind = stat.S_IFMT(info.external_attr >> 16)  # 0: not said (Python's zipfile)
        if kind not in (0, stat.S_IFREG):
            raise BundleRefused(f"member {name!r} is not a regular file (a link or a folder)")
        if info.flag_bits & 0x1:
            raise BundleRefused(f"member {name!r} is encrypted")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise BundleRefused(
                f"member {name!r} is compressed with method {info.compress_type}; a bundle's "
                "members are stored or deflated"
            )
        if info.file_size > info.compress_size * layout.MAX_RATIO + layout.RATIO_SLACK:
            raise BundleRefused(
                f"member {name!r} would unpack to {info.file_size} bytes from "
                f"{info.compress_size}, more than {layout.MAX_RATIO} times its packed size "
                "(a zip bomb?)"
            )
        total += info.file_size
        if total > cap:
            raise BundleRefused(
                f"the members unpack to more than {cap} bytes (at {name!r}); this master takes "
                "at most that (MLBENCH_BUNDLE_MAX_UNPACKED_BYTES)"
            )
        entries[name] = info
    return entries


def _folder_entry(info: zipfile.ZipInfo, folders: set[str]) -> None:
    """A folder's entry (its name ends in /): a bundle repacked with `zip -r` has one for
    each folder, holding nothing. Its path passes the same checks as a member's (it stays
    inside, appears once); BundleRefused otherwise, or when it holds data or is a link."""
    name = info.filename
    try:
        layout.check_path(name[:-1])
    except layout.BadPath as exc:
        raise BundleRefused(str(exc).replace(repr(name[:-1][:80]), repr(name[:80]), 1)) from None
    if name in folders:
        raise BundleRefused(f"member {name!r} is in the file twice")
    if stat.S_IFMT(info.external_attr >> 16) not in (0, stat.S_IFDIR) or info.file_size:
        raise BundleRefused(f"member {name!r} is not a regular file (a link or a folder)")
    folders.add(name)


def _small(archive: zipfile.ZipFile, entries: dict, name: str, cap: int) -> bytes:
    info = entries.get(name)
    if info is None:
        raise BundleRefused(
            f"{name} is missing: this is no mlbench result bundle (or not a whole one)"
        )
    if info.file_size > cap:
        raise BundleRefused(f"{name} is {info.file_size} bytes; at most {cap} are read")
    try:
        with archive.open(info) as fh:
            body = fh.read(cap + 1)  # to its end: the zip module then checks its CRC
    except Exception as exc:
        raise BundleRefused(f"member {name!r} {damage(exc)}") from None
    if len(body) != info.file_size:
        raise BundleRefused(
            f"member {name!r} holds {len(body)} bytes, and the zip's directory declares "
            f"{info.file_size}: the file is damaged"
        )
    return body


def damage(exc: Exception) -> str:
    """What an error met while reading the zip or a member says of its bytes: any error at
    all is the file's fault here (the zip module lets zlib's errors through, and raises
    NotImplementedError or RuntimeError for headers it does not take)."""
    if isinstance(exc, zlib.error):
        return f"holds damaged compressed data ({exc})"
    if isinstance(exc, EOFError):
        return f"is truncated: its data ends before the size it declares ({exc})"
    if isinstance(exc, zipfile.BadZipFile):
        return f"is damaged ({exc})"
    return f"cannot be read ({_said(exc)})"


def _said(exc: Exception) -> str:
    if isinstance(exc, zipfile.BadZipFile):
        return str(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _manifest(body: bytes) -> dict[str, Any]:
    try:
        manifest = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise BundleRefused(f"{layout.MANIFEST} is not JSON: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != layout.FORMAT:
        raise BundleRefused(f"{layout.MANIFEST} does not say format {layout.FORMAT!r}")
    version = manifest.get("format_version")
    if version != layout.VERSION:
        raise BundleRefused(
            f"the bundle is of format version {version!r}; this master reads version "
            f"{layout.VERSION} (a newer mlbench may read it)"
        )
    return manifest


def _origin(manifest: dict[str, Any]) -> signing.Installation:
    origin = manifest.get("origin")
    key = origin.get("public_key") if isinstance(origin, dict) else None
    if not isinstance(key, str):
        raise BundleRefused(f"{layout.MANIFEST} names no origin public key")
    try:
        return signing.Installation(key, signing.fingerprint(key))
    except ValueError as exc:
        raise BundleRefused(f"the origin's public key: {exc}") from None


def _members(manifest: dict[str, Any], entries: dict) -> dict[str, dict[str, Any]]:
    listed = manifest.get("members")
    if not isinstance(listed, list):
        raise BundleRefused(f"{layout.MANIFEST} has no list of members")
    members: dict[str, dict[str, Any]] = {}
    for item in listed:
        path = item.get("path") if isinstance(item, dict) else None
        digest = item.get("sha256") if isinstance(item, dict) else None
        size = item.get("bytes") if isinstance(item, dict) else None
        if not isinstance(path, str) or not isinstance(digest, str) or len(digest) != 64:
            raise BundleRefused(
                f"a member of the manifest lacks its path or SHA-256: {item!r:.120}"
            )
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise BundleRefused(f"member {path!r}: its size in the manifest is not a number")
        try:
            layout.place(path)
        except layout.BadPath as exc:
            raise BundleRefused(str(exc)) from None
        if path in members:
            raise BundleRefused(f"member {path!r} is listed twice in the manifest")
        members[path] = item
    present = set(entries) - {layout.MANIFEST, layout.SIGNATURE}
    if missing := sorted(set(members) - present):
        raise BundleRefused(
            f"member {missing[0]!r} is listed in the signed manifest but missing from the file"
        )
    if extra := sorted(present - set(members)):
        raise BundleRefused(
            f"member {extra[0]!r} is in the file but not in the signed manifest (added after "
            "signing)"
        )
    for path, item in members.items():
        if entries[path].file_size != item["bytes"]:
            raise BundleRefused(
                f"member {path!r} is {entries[path].file_size} bytes, the signed manifest "
                f"says {item['bytes']}: it was changed after signing"
            )
    return members


def _ids(value: Any, what: str) -> list[int]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value
    ):
        raise BundleRefused(f"{layout.MANIFEST}: {what} is not a list of run ids")
    if len(set(value)) != len(value):
        raise BundleRefused(f"{layout.MANIFEST}: {what} names a run twice")
    return list(value)


def _runs(manifest: dict[str, Any], members: dict) -> tuple[list[int], int | None]:
    runs = _ids(manifest.get("runs"), "runs")
    series = manifest.get("series")
    if series is not None and (not isinstance(series, int) or isinstance(series, bool)):
        raise BundleRefused(f"{layout.MANIFEST}: series is not a series id")
    if (series is None) == (layout.SERIES in members):
        raise BundleRefused(
            f"{layout.MANIFEST}: series {series!r} and the member {layout.SERIES} disagree"
        )
    for path in members:
        kind, owner, _ = layout.place(path)
        if kind == "run" and owner not in runs:
            raise BundleRefused(f"member {path!r} belongs to no run the manifest lists")
    for run in runs:
        for name in layout.RUN_FILES:
            if layout.run_folder(run) + name not in members:
                raise BundleRefused(
                    f"run {run}: member {layout.run_folder(run) + name!r} is missing"
                )
    return runs, series


def _study(manifest: dict[str, Any], members: dict) -> int | None:
    """The study of a study bundle: the manifest's `study` and its member agree; series
    records travel only with a study. What study.json says is read by study_member.py."""
    study = manifest.get("study")
    if study is not None and (not isinstance(study, int) or isinstance(study, bool)):
        raise BundleRefused(f"{layout.MANIFEST}: study is not a study id")
    kinds = [(layout.place(p)[0], p) for p in members]
    held = sorted(p for kind, p in kinds if kind == "study")
    if held != (want := [layout.study_path(study)] if study is not None else []):
        raise BundleRefused(f"{layout.MANIFEST}: study {study!r} and the study members "
                            f"{held} disagree (it should hold {want})")  # fmt: skip
    if study is None and (stray := sorted(p for k, p in kinds if k == "study_series")):
        raise BundleRefused(f"member {stray[0]!r}: a series record travels only with its study")
    return study


def _check_member(archive: zipfile.ZipFile, path: str, listed: dict[str, Any]) -> None:
    digest, size = hashlib.sha256(), 0
    try:
        with archive.open(path) as fh:
            while chunk := fh.read(CHUNK):
                size += len(chunk)
                if size > listed["bytes"]:
                    break
                digest.update(chunk)
    except Exception as exc:
        raise BundleRefused(f"member {path!r} {damage(exc)}") from None
    if size != listed["bytes"] or digest.hexdigest() != listed["sha256"]:
        raise BundleRefused(
            f"member {path!r}: its SHA-256 is not the one in the signed manifest (it was "
            "changed after signing)"
        )


def _carried(
    verified: Verified, work: Path, stack: contextlib.ExitStack, nested: bool
) -> list[Carried]:
    entries = verified.manifest.get("carried") or []
    if not isinstance(entries, list):
        raise BundleRefused(f"{layout.MANIFEST}: carried is not a list")
    bundles = {p for p in verified.members if layout.place(p)[0] == "carried"}
    named = set()
    out = []
    for entry in entries:
        path = entry.get("bundle") if isinstance(entry, dict) else None
        if path not in bundles or path in named:
            raise BundleRefused(f"{layout.MANIFEST}: carried entry {entry!r:.120} names no member")
        if nested:
            raise BundleRefused(
                f"the carried bundle {path!r} carries bundles itself; only one level is read"
            )
        named.add(path)
        copy = work / Path(path).name
        with verified.open(path) as src, open(copy, "wb") as dst:
            shutil.copyfileobj(src, dst, CHUNK)
        try:
            inner = _verify(copy, work, stack, nested=True)
        except BundleRefused as exc:
            raise type(exc)(f"the carried bundle {path!r}: {exc}") from None
        if inner.digest != layout.place(path)[1]:
            raise BundleRefused(f"member {path!r} is not the bundle its name's digest names")
        runs = _ids(entry.get("runs"), f"carried {path} runs")
        if missing := sorted(set(runs) - set(inner.runs)):
            raise BundleRefused(f"member {path!r} does not hold run {missing[0]}")
        series = entry.get("series")
        if series is not None and series != inner.series:
            raise BundleRefused(f"member {path!r} does not hold series {series!r}")
        out.append(Carried(inner, runs, series))
    if unnamed := sorted(bundles - named):
        raise BundleRefused(f"member {unnamed[0]!r} is carried but no carried entry names it")
    return out
