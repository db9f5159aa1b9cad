"""Message sizes of the sweep: parsing "64MiB" and listing the sizes between two bounds.

Hand-written rather than a library (humanfriendly, pint): the flags take a whole number of
bytes with an optional binary suffix (KiB, MiB, GiB; K/M/G read the same), ten lines that
do not justify a dependency in the worker image. Sizes are whole float32 elements, so the
tensor of every message is exactly that many bytes.
"""

from __future__ import annotations

import re

ELEMENT_BYTES = 4  # float32: what gradients are, and what the collectives move here
_UNITS = {
    "": 1,
    "b": 1,
    "k": 2**10,
    "kib": 2**10,
    "m": 2**20,
    "mib": 2**20,
    "g": 2**30,
    "gib": 2**30,
}
_SIZE = re.compile(r"^\s*(\d+)\s*([a-z]*)\s*$", re.IGNORECASE)
MAX_SIZE = 2**30  # 1 GiB: more would not fit beside a model on most workers


def parse_size(text: str) -> int:
    """Bytes in `text` ("4096", "1KiB", "64 MiB"); ValueError naming the problem otherwise."""
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _UNITS:
        raise ValueError(f"{text!r} is not a size: give bytes, e.g. 4096, 1KiB, 64MiB or 1GiB")
    size = int(match.group(1)) * _UNITS[unit]
    if size < ELEMENT_BYTES or size % ELEMENT_BYTES:
        raise ValueError(f"{text!r} is not a whole number of float32 elements (4 bytes each)")
    if size > MAX_SIZE:
        raise ValueError(f"{text!r} is more than 1 GiB")
    return size


def size_list(smallest: int, largest: int, factor: int) -> list[int]:
    """smallest, smallest*factor, ... up to largest (included when it is on the way)."""
    if factor < 2:
        raise ValueError(f"the size factor must be 2 or more, got {factor}")
    if smallest > largest:
        raise ValueError(
            f"the smallest size ({label(smallest)}) is above the largest ({label(largest)})"
        )
    sizes = []
    size = smallest
    while size <= largest:
        sizes.append(size)
        size *= factor
    return sizes


def label(size: int) -> str:
    """1024 -> "1 KiB", 3000 -> "3000 B": how tables and logs name a size."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"
