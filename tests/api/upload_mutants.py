"""Seeded corpora of damaged uploads, and a digest of what the master stores, for the fuzz
tests of every endpoint that parses a client's bytes (tests/api/test_upload_fuzz.py:
predictions and models; tests/bundles/test_bundle_fuzz.py: bundles).

A .npz and a bundle are both zip files, so one set of zip mutations serves both, aimed
where the parsers have failed before: a byte flipped inside a member's (deflated) data, the
fields of a member's local header and of its central directory entry (sizes, CRC, method,
flags, name length, offset), sizes declared huge, the end record, truncations at several
points, and random bytes. `npy_members` adds .npy headers that are unbalanced, declare
more or less data than they hold, hold Python objects, or are no header at all.
Everything is drawn from a `random.Random` the caller seeds: the corpus is the same on
every run.
"""

from __future__ import annotations

import hashlib
import io
import random
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from mlbench_master.api.models import (
    ImportedBundle,
    LogChunk,
    Metric,
    Run,
    RunOrigin,
    Series,
)

LOCAL, CENTRAL, END = b"PK\x03\x04", b"PK\x01\x02", b"PK\x05\x06"
# (offset, width) of the fields of a local header and of a central directory entry
LOCAL_FIELDS = {
    "version": (4, 2), "flags": (6, 2), "method": (8, 2), "crc": (14, 4),
    "packed size": (18, 4), "size": (22, 4), "name length": (26, 2), "extra length": (28, 2),
}  # fmt: skip
CENTRAL_FIELDS = {
    "version made by": (4, 2), "version needed": (6, 2), "flags": (8, 2), "method": (10, 2),
    "crc": (16, 4), "packed size": (20, 4), "size": (24, 4), "name length": (28, 2),
    "extra length": (30, 2), "comment length": (32, 2), "attributes": (38, 4),
    "header offset": (42, 4),
}  # fmt: skip
END_FIELDS = {"entries": (10, 2), "directory size": (12, 4), "directory offset": (16, 4)}
HUGE = (0xFFFFFFFF, 0x10000000)


@dataclass(frozen=True)
class Member:
    name: str
    local: int  # where its local header starts
    data: int  # where its (packed) data starts
    packed: int  # its packed size
    central: int  # where its central directory entry starts


def members(body: bytes) -> list[Member]:
    """Where each member of the zip `body` lies."""
    found = []
    with zipfile.ZipFile(io.BytesIO(body)) as zf:
        infos = zf.infolist()
    central = body.rindex(END)
    start = struct.unpack_from("<I", body, central + 16)[0]
    entries = []
    at = start
    while body[at : at + 4] == CENTRAL:
        n, e, c = struct.unpack_from("<HHH", body, at + 28)
        entries.append(at)
        at += 46 + n + e + c
    for info, entry in zip(infos, entries, strict=True):
        n, e = struct.unpack_from("<HH", body, info.header_offset + 26)
        data = info.header_offset + 30 + n + e
        found.append(Member(info.filename, info.header_offset, data, info.compress_size, entry))
    return found


def _put(body: bytes, at: int, width: int, value: int) -> bytes:
    out = bytearray(body)
    out[at : at + width] = (value & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
    return bytes(out)


def _flip(body: bytes, at: int, rng: random.Random) -> bytes:
    out = bytearray(body)
    out[at] ^= 1 << rng.randrange(8)
    return bytes(out)


def zip_mutants(body: bytes, rng: random.Random, fields_each: int = 3) -> list[tuple[str, bytes]]:
    """Damaged copies of the zip `body`, each with what was done to it: every header field
    of two members (the first and one drawn), `fields_each` drawn fields of the others."""
    out: list[tuple[str, bytes]] = []
    listed = members(body)
    every = {listed[0].name, rng.choice(listed).name}
    for m in listed:
        if m.packed:
            inside = m.data + rng.randrange(m.packed)
            out.append((f"{m.name}: a bit of its data flipped", _flip(body, inside, rng)))
            out.append((f"{m.name}: its first data byte flipped", _flip(body, m.data, rng)))
            inside = m.data + rng.randrange(m.packed)
            out.append(
                (
                    f"{m.name}: a byte of its data replaced",
                    _put(body, inside, 1, rng.randrange(256)),
                )
            )
        for where, fields, base in (
            ("local", LOCAL_FIELDS, m.local),
            ("central", CENTRAL_FIELDS, m.central),
        ):
            names = sorted(fields) if m.name in every else rng.sample(sorted(fields), fields_each)
            for name in names:
                at, width = fields[name]
                flipped = _flip(body, base + at + rng.randrange(width), rng)
                out.append((f"{m.name}: {where} {name} flipped", flipped))
    for m in rng.sample(listed, min(2, len(listed))):
        for huge in HUGE:
            for where, fields, base in (
                ("central", CENTRAL_FIELDS, m.central),
                ("local", LOCAL_FIELDS, m.local),
            ):
                for name in ("size", "packed size"):
                    at, width = fields[name]
                    out.append(
                        (
                            f"{m.name}: {where} {name} declared {huge}",
                            _put(body, base + at, width, huge),
                        )
                    )
            both = _put(body, m.central + CENTRAL_FIELDS["size"][0], 4, huge)
            both = _put(both, m.local + LOCAL_FIELDS["size"][0], 4, huge)
            out.append((f"{m.name}: both sizes declared {huge}", both))
    end = body.rindex(END)
    for name, (at, width) in END_FIELDS.items():
        out.append(
            (f"end record: {name} flipped", _flip(body, end + at + rng.randrange(width), rng))
        )
        out.append((f"end record: {name} declared huge", _put(body, end + at, width, 0xFFFFFFFF)))
    cuts = {0, 1, 4, 30, len(body) // 3, len(body) // 2, len(body) - 22, len(body) - 1}
    cuts |= {m.data + m.packed // 2 for m in rng.sample(listed, min(3, len(listed)))}
    cuts.add(struct.unpack_from("<I", body, end + 16)[0] + 10)  # inside the directory
    for cut in sorted(cuts):
        out.append((f"truncated to {cut} bytes", body[:cut]))
    return [(what, damaged) for what, damaged in out if damaged != body]  # fmt: skip


def random_bodies(rng: random.Random) -> list[tuple[str, bytes]]:
    """Bodies that are no file of any format: random bytes, some dressed as a zip."""
    out = [(f"{n} random bytes", rng.randbytes(n)) for n in (1, 100, 5000)]
    out.append(("a local header and random bytes", LOCAL + rng.randbytes(200)))
    out.append(("an end record and random bytes", rng.randbytes(100) + END + rng.randbytes(18)))
    out.append(("an empty zip", END + bytes(18)))
    return out


def zipped(files: dict[str, bytes], compressed: bool) -> bytes:
    buffer = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED
    with zipfile.ZipFile(buffer, "w", method) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return buffer.getvalue()


def npy(header: str, data: bytes = b"", version: bytes = b"\x01\x00") -> bytes:
    """A .npy member of this header text (padded as numpy pads it) and data."""
    text = header.encode("latin-1")
    text += b" " * (-(len(text) + 11) % 64) + b"\n"
    width = "<H" if version == b"\x01\x00" else "<I"
    return b"\x93NUMPY" + version + struct.pack(width, len(text)) + text + data


def npy_members(rng: random.Random) -> list[tuple[str, bytes]]:
    """.npy members whose header or data is wrong, each with what is wrong: the value of a
    field (the caller puts it among the file's other members)."""
    eight = struct.pack("<q", 100)
    head = "{'descr': '<i8', 'fortran_order': False, 'shape': (), }"
    return [
        ("an unclosed header dictionary", npy("{'descr': '<i8', 'fortran_order': False, 'shape': ()", eight)),
        ("an unclosed shape", npy("{'descr': '<i8', 'fortran_order': False, 'shape': (, }", eight)),
        ("a bracket closing nothing", npy("{'descr': '<i8', 'fortran_order': False, 'shape': ()]}", eight)),
        ("an unclosed quote", npy("{'descr': '<i8, 'fortran_order': False, 'shape': () }", eight)),
        ("a header that is no literal", npy("{'descr': '<i8', 'fortran_order': False, 'shape': __import__('os')}", eight)),
        ("a header that is a list", npy("['<i8', False, ()]", eight)),
        ("a header lacking its shape", npy("{'descr': '<i8', 'fortran_order': False}", eight)),
        ("a negative shape", npy("{'descr': '<i8', 'fortran_order': False, 'shape': (-1,), }", eight)),
        ("a shape of text", npy("{'descr': '<i8', 'fortran_order': False, 'shape': 'x', }", eight)),
        ("a shape written as an expression", npy("{'descr': '<i8', 'fortran_order': False, 'shape': (10**12,), }", eight)),
        ("a shape declaring 8 TB", npy("{'descr': '<i8', 'fortran_order': False, 'shape': (1000000000000,), }", eight)),
        ("a shape declaring more data than held", npy("{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", eight)),
        ("data beyond the shape", npy(head, eight * 2)),
        ("data cut short", npy(head, eight[:5])),
        ("fortran_order of text", npy("{'descr': '<i8', 'fortran_order': 'yes', 'shape': (), }", eight)),
        ("an unknown descr", npy("{'descr': 'not a type', 'fortran_order': False, 'shape': (), }", eight)),
        ("a descr of Python objects", npy("{'descr': '|O', 'fortran_order': False, 'shape': (), }", eight)),
        ("a descr of no size", npy("{'descr': '|V0', 'fortran_order': False, 'shape': (), }")),
        ("a structured descr holding objects", npy("{'descr': [('a', '|O')], 'fortran_order': False, 'shape': (), }", eight)),
        ("a header declaring 4 GB", b"\x93NUMPY\x02\x00" + b"\xff\xff\xff\xff" + head.encode()),
        ("format version 9.9", npy(head, eight).replace(b"NUMPY\x01\x00", b"NUMPY\x09\x09", 1)),
        ("format version 3.0 with invalid UTF-8", npy("{'descr': '<i8', 'fortran_order': False, 'shape': (), 'x': '\xff'}", eight, b"\x03\x00")),
        ("no magic", b"\x00NUMPY\x01\x00" + npy(head, eight)[8:]),
        ("only the magic", b"\x93NUMPY"),
        ("an empty member", b""),
        ("random bytes", rng.randbytes(64)),
    ]  # fmt: skip


def stored_state(home: Path | None = None) -> str:
    """A digest of everything a refused upload must leave as it was: the rows of runs,
    series, metric points, log chunks, imported bundles and origins, and every file under
    MLBENCH_HOME's predictions/, models/ and bundles/ (temporary uploads included)."""
    digest = hashlib.sha256()
    for model in (Run, Series, Metric, LogChunk, ImportedBundle, RunOrigin):
        for row in model.objects.order_by("pk").values_list():
            digest.update(repr(row).encode())
        digest.update(b"|")
    home = Path(home or settings.MLBENCH_HOME)
    for folder in ("predictions", "models", "bundles"):
        for path in sorted((home / folder).rglob("*")):
            if path.is_file():
                digest.update(str(path.relative_to(home)).encode())
                digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


# What an upload is refused with, whatever the damage: 400 (unreadable, naming the field),
# 409 (the run's frozen results refuse it) or 413 (over its cap). Which of the three a
# mutant meets depends on where the random damage falls, hence a set.
REFUSALS = (400, 409, 413)


def check_answer(response, field: str, what: str, taken: tuple[int, ...]) -> tuple[bool, str]:
    """Assert that `response` to the upload `what` is either one of the endpoint's answers
    to an upload it takes (`taken`) or a refusal (REFUSALS) in the API's error JSON, a 400
    naming `field`; never a server error nor any other status. Whether it was accepted, and
    the refusal's message."""
    status = response.status_code
    content = getattr(response, "content", b"")[:300]
    assert status in taken + REFUSALS, f"{what}: {status} {content!r}"
    if status in taken:
        return True, ""
    body = response.json()
    assert isinstance(body.get("detail"), str) and body["detail"], (what, body)
    if status == 400:
        assert list(body.get("errors", {})) == [field], (what, body)
        assert body["errors"][field][0], (what, body)
    return False, body["detail"]


def fuzz(
    post, corpus: list[tuple[str, bytes]], field: str, *, taken: tuple[int, ...]
) -> dict[str, str | None]:
    """POST each body of `corpus` with `post(body)`: each is taken (a status of `taken`) or
    refused (check_answer), and a refused one must leave the stored data (stored_state) as
    it was. Each upload's refusal message, None where it was accepted (a damage the parsers
    need not see, such as a field of a local header that the central directory repeats):
    its state is then the next one's baseline."""
    said: dict[str, str | None] = {}
    before = stored_state()
    for i, (what, body) in enumerate(corpus):
        what = what if what not in said else f"{what} ({i})"
        accepted, message = check_answer(post(body), field, what, taken)
        after = stored_state()
        if not accepted:
            assert after == before, f"{what}: refused, yet the stored data changed"
        said[what] = None if accepted else message
        before = after
    return said


def refused(said: dict[str, str | None]) -> int:
    return sum(1 for message in said.values() if message is not None)
