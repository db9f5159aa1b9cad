"""The installation's own key: it signs every result bundle this master exports, and its
public half names the installation wherever its results are shown.

Why Ed25519 through `cryptography`: small keys and signatures, no parameters to choose, and
a library that is kept, so the project writes no cryptography of its own. The private key
never leaves the master: it is read here and used only by `sign`; pages, the API and the
bundles carry the public key and its fingerprint.

Where the key comes from (docs/publishing.rst): MLBENCH_SIGNING_KEY, a PEM text (the helm
chart puts a key it generated at install into a Secret and keeps it across upgrades); else
the file MLBENCH_HOME/signing_key.pem, made on first need (the embedded master's migrate
step at its first start) with mode 0600, like the secret key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

ALGORITHM = "Ed25519"
KEY_FILE = "signing_key.pem"
ENV = "MLBENCH_SIGNING_KEY"


@dataclass(frozen=True)
class Installation:
    """How an installation is named: its public key (base64 of the 32 raw bytes) and the
    key's fingerprint, short enough to read aloud."""

    public_key: str
    fingerprint: str

    def as_dict(self) -> dict[str, str]:
        return {
            "public_key": self.public_key,
            "fingerprint": self.fingerprint,
            "algorithm": ALGORITHM,
        }


def fingerprint(public_key: str) -> str:
    """The first 16 hex digits of the SHA-256 of the raw public key, in groups of four: what
    a person compares (the full key is what a program compares)."""
    digest = hashlib.sha256(_raw_public(public_key)).hexdigest()[:16]
    return ":".join(digest[i : i + 4] for i in range(0, 16, 4))


def public_key_of(text: str) -> str:
    """`text` as an Ed25519 public key in the form this project writes one (base64 of the
    32 raw bytes, surrounding white space dropped); ValueError saying what is wrong. The
    one check of a key a person or a client gives (bundles/trust.py)."""
    key = text.strip()
    if not key:
        raise ValueError("no key given")
    return base64.b64encode(_raw_public(key)).decode("ascii")


def _raw_public(public_key: str) -> bytes:
    try:
        raw = base64.b64decode(public_key.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise ValueError(f"{public_key[:60]!r} is not base64") from None
    if len(raw) != 32:
        raise ValueError(f"an Ed25519 public key has 32 bytes, this one {len(raw)}")
    return raw


def key_path() -> Path:
    return Path(settings.MLBENCH_HOME) / KEY_FILE


_LOCK = threading.Lock()
_LOADED: dict[str, Ed25519PrivateKey] = {}


def _private_key() -> Ed25519PrivateKey:
    """The installation's private key (see the module docstring for where it comes from)."""
    pem = os.environ.get(ENV, "").strip()
    source = f"env:{hashlib.sha256(pem.encode()).hexdigest()}" if pem else str(key_path())
    with _LOCK:
        known = _LOADED.get(source)
        if known is not None:
            return known
        if pem:
            key = _parse(pem.encode(), ENV)
        else:
            key = _parse(_read_or_make(key_path()), str(key_path()))
        _LOADED[source] = key
        return key


def _parse(pem: bytes, where: str) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise ImproperlyConfigured(f"{where} holds no readable PEM private key: {exc}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ImproperlyConfigured(
            f"{where} holds a {type(key).__name__}, not an Ed25519 private key"
        )
    return key


def _read_or_make(path: Path) -> bytes:
    """The key file's bytes, made first when there is none. Made under a temporary name and
    linked into place, so two processes starting together never read a half-written key:
    the second link fails and that process reads the first one's key."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        pem = Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(pem)
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass
        finally:
            tmp.unlink(missing_ok=True)
    return path.read_bytes()


def ensure_key() -> Installation:
    """Make the key where none exists yet, check it where one does (the migrate step calls
    this, so a broken MLBENCH_SIGNING_KEY stops the install, not the first export)."""
    return this_installation()


def this_installation() -> Installation:
    raw = (
        _private_key()
        .public_key()
        .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    )
    public = base64.b64encode(raw).decode("ascii")
    return Installation(public, fingerprint(public))


def sign(data: bytes) -> str:
    """The installation's signature of `data`, base64 (what a bundle's signature file holds)."""
    return base64.b64encode(_private_key().sign(data)).decode("ascii")


def verify(public_key: str, signature: str, data: bytes) -> bool:
    """Whether `signature` (base64) is `public_key`'s signature of `data`. A key or a
    signature that cannot be read does not verify."""
    try:
        key = Ed25519PublicKey.from_public_bytes(_raw_public(public_key))
        raw = base64.b64decode(signature.strip().encode("ascii"), validate=True)
        key.verify(raw, data)
    except (InvalidSignature, ValueError, binascii.Error, UnicodeEncodeError):
        return False
    return True
