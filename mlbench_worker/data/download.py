"""One streamed download for every task's data set: into a .part file, then renamed.

Why one place: the readers of CIFAR-10, epsilon and WikiText-2 each fetched their archive
the same way (requests in 1 MiB chunks, a `.part<pid>` file so that a broken download never
looks whole and two ranks never write one file, the part removed on any failure), and the
copies had begun to differ (only epsilon checked its digest on the way). The readers keep
what is theirs: the URL, the message that says how to place the files by hand, and which
checksum the set publishes.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

CHUNK = 1 << 20
_NAMES = {"sha256": "SHA-256", "sha1": "SHA-1", "md5": "MD5"}  # as the data sets publish them


class DownloadFailed(Exception):
    """The URL could not be fetched whole; the message names the URL and the cause."""


class WrongDigest(Exception):
    """The file arrived whole but its digest is not the expected one (nothing was kept)."""

    def __init__(self, url: str, algorithm: str, got: str, expected: str) -> None:
        name = _NAMES.get(algorithm, algorithm.upper())
        super().__init__(
            f"{url} has the wrong checksum ({name} {got}, expected {expected}): "
            "the download was incomplete or is not the official file"
        )
        self.got, self.expected = got, expected


def fetch(
    url: str,
    target: Path,
    *,
    timeout: float = 30.0,
    digest: tuple[str, str] | None = None,
    say: Callable[[str], None] | None = None,
) -> Path:
    """`url` saved as `target`, or DownloadFailed / WrongDigest with nothing left behind.

    `digest`: (hashlib algorithm, expected hex digest), computed as the bytes arrive and
    checked before the file takes its name. `say`: told the URL and size when it starts.
    """
    import requests

    target = Path(target)
    part = target.with_name(f"{target.name}.part{os.getpid()}")
    hasher = hashlib.new(digest[0]) if digest else None
    try:
        with requests.get(url, stream=True, timeout=(10.0, timeout)) as resp:
            resp.raise_for_status()
            if say is not None:
                total = int(resp.headers.get("content-length") or 0)
                say(f"downloading {url}" + (f" ({total / 2**20:,.1f} MiB)" if total else ""))
            with open(part, "wb") as fh:
                for chunk in resp.iter_content(CHUNK):
                    fh.write(chunk)
                    if hasher is not None:
                        hasher.update(chunk)
        if digest is not None and hasher is not None and hasher.hexdigest() != digest[1]:
            raise WrongDigest(url, digest[0], hasher.hexdigest(), digest[1])
        os.replace(part, target)
    except (requests.RequestException, OSError) as exc:
        raise DownloadFailed(f"{url}: {exc}") from exc
    finally:
        part.unlink(missing_ok=True)
    return target
