"""The text member of the predictions format: a translation run's hypotheses.

A translation task (4b) predicts sentences, not classes. Its predictions file holds
``predicted_text``: a 1-D uint8 array of the UTF-8 bytes of its lines joined by "\\n", one
line per test sentence in the test set's order, each the hypothesis's SentencePiece pieces
joined by single spaces ("▁", U+2581, marks where a word starts). Bytes, not a numpy text
array: numpy's fixed-width "<U" arrays pad every line to the longest one in UTF-32, four
bytes a character, and the bytes' own boundaries are what a reader in another language
splits on. Joined lines leave no ambiguity in how many there are: count("\\n") + 1, so an
empty array is one empty line.

The test set's digest for a text task is the SHA-256 of its references joined the same way
(`digest_of_text`), so a solver that holds the references can compute it and a set read in
another order is refused, as for the labelled tasks.

`decode` refuses what cannot be one hypothesis a line: bytes that are not UTF-8 (naming
the line and the byte), control characters or line separators inside a line (a "\\r" or a
NUL would make two readers count lines or characters differently), another dtype or shape.
How many lines the run's test set has is the master's check (scoring.graded_size).
"""

from __future__ import annotations

import hashlib
import re

import numpy as np

TEXT = "predicted_text"
SEPARATOR = "\n"
# Refused inside a line: Unicode's control characters (category Cc: U+0000-001F and
# U+007F-009F, "\n" included) and its line and paragraph separators (Zl, Zp).
_REFUSED = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


class TextRefused(ValueError):
    """Hypotheses that are not lines of text in the format; the message names the problem."""


def digest_of_text(references: list[str]) -> str:
    """The test set digest of a text task: SHA-256 (hex) of its lines joined by "\\n"."""
    return hashlib.sha256(SEPARATOR.join(references).encode("utf-8")).hexdigest()


def encode(lines: list[str]) -> np.ndarray:
    """The ``predicted_text`` array of `lines`; TextRefused for a line the format cannot hold."""
    if isinstance(lines, str):
        raise TextRefused(f"{TEXT} is a list of lines, one per test sentence, not one text")
    for number, line in enumerate(lines):
        if not isinstance(line, str):
            raise TextRefused(f"{TEXT} line {number} is {type(line).__name__}, not text")
        _check_line(line, number, "")
    raw = SEPARATOR.join(lines).encode("utf-8")
    return np.frombuffer(raw, dtype=np.uint8).copy()


def decode(array: np.ndarray, where: str) -> tuple[str, ...]:
    """The lines an array of the format holds; TextRefused naming what is wrong."""
    if array.dtype != np.uint8 or array.ndim != 1:
        raise TextRefused(
            f"{where}: {TEXT} must be a 1-D uint8 array of UTF-8 bytes; found {array.dtype} "
            f"of shape {array.shape}"
        )
    raw = array.tobytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start)
        start = raw.rfind(b"\n", 0, exc.start) + 1
        raise TextRefused(
            f"{where}: {TEXT} is not UTF-8: line {line}, byte {exc.start - start} of the "
            f"line ({exc.reason}, byte 0x{raw[exc.start]:02x})"
        ) from None
    lines = text.split(SEPARATOR)
    for number, line in enumerate(lines):
        _check_line(line, number, where)
    return tuple(lines)


def _check_line(line: str, number: int, where: str) -> None:
    found = _REFUSED.search(line)
    if found is not None:
        said = f"{where}: " if where else ""
        raise TextRefused(
            f"{said}{TEXT} line {number} holds the control character U+{ord(found.group()):04X} "
            f"at character {found.start()}; a line is one hypothesis of printable text (lines "
            "are separated by \\n only)"
        )
