"""A zip archive written while it is sent: memory stays flat whatever the run's size.

`zipfile` can write to a stream that cannot seek (it then puts each entry's sizes in a
data descriptor after the data). We hand it a sink that collects the bytes it writes and
yield them as they pile up.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterable, Iterator

FLUSH_BYTES = 256 * 1024


class _Sink:
    """Write-only file object; `take()` returns and forgets what was written."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self.size = 0

    def write(self, data: bytes) -> int:
        self._parts.append(bytes(data))
        self.size += len(data)
        return len(data)

    def flush(self) -> None:
        pass

    def take(self) -> bytes:
        out = b"".join(self._parts)
        self._parts.clear()
        self.size = 0
        return out


def stream_zip(entries: Iterable[tuple[str, Iterable[bytes]]]) -> Iterator[bytes]:
    """The bytes of a zip holding each (name, chunks) entry, deflated, produced lazily."""
    sink = _Sink()
    archive = zipfile.ZipFile(sink, mode="w", compression=zipfile.ZIP_DEFLATED)  # noqa: SIM115
    for name, chunks in entries:
        with archive.open(name, mode="w", force_zip64=True) as member:
            for chunk in chunks:
                member.write(chunk)
                if sink.size >= FLUSH_BYTES:
                    yield sink.take()
        if sink.size:
            yield sink.take()
    archive.close()
    yield sink.take()
