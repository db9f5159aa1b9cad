"""WMT17 English-to-German as task 4b reads it: where its files come from and how the test
set's SGML becomes sentences.

Written once, torch-free, so that the worker (which decodes newstest2017's sources and
digests its references) and the evaluator (which holds the references it grades against)
read the same sentences. The test set is read as sacrebleu reads WMT's SGML (a line that
starts with "<seg " holds one segment; its text between the tags, outer blanks removed and
inner runs of blanks made one space, entities left as they are), so a BLEU computed here
equals `sacrebleu -t wmt17 -l en-de` on the same hypotheses.

Where the files come from: the test set is in WMT17's `test.tgz`, whose MD5 sacrebleu's
table of test sets publishes (TEST_ARCHIVE_MD5); it is downloaded when missing. The
training corpora (Europarl v7, Common Crawl, News Commentary v12, Rapid 2016: WMT17's
English-German constrained data, 5.9 million pairs) are four archives with no checksum we
could check on the machines this was written on, so they are never downloaded unchecked:
they are placed by hand (TRAINING names each pair of files and where it comes from).
"""

from __future__ import annotations

import re
from pathlib import Path

FOLDER = "wmt17"
TEST_SENTENCES = 3004  # newstest2017 en-de
TEST_SOURCE = "newstest2017-ende-src.en.sgm"
TEST_REFERENCE = "newstest2017-ende-ref.de.sgm"
TEST_ARCHIVE = "test.tgz"
TEST_ARCHIVE_URL = "https://data.statmt.org/wmt17/translation-task/test.tgz"
TEST_ARCHIVE_MD5 = "86a1724c276004aa25455ae2a04cef26"  # sacrebleu 2.6.0's table ("wmt17")
TEST_MEMBERS = (f"test/{TEST_SOURCE}", f"test/{TEST_REFERENCE}")

# (English file, German file, the archive that holds them): WMT17's en-de training data.
TRAINING: tuple[tuple[str, str, str], ...] = (
    ("europarl-v7.de-en.en", "europarl-v7.de-en.de",
     "https://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz"),
    ("commoncrawl.de-en.en", "commoncrawl.de-en.de",
     "https://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz"),
    ("news-commentary-v12.de-en.en", "news-commentary-v12.de-en.de",
     "https://data.statmt.org/wmt17/translation-task/training-parallel-nc-v12.tgz"),
    ("rapid2016.de-en.en", "rapid2016.de-en.de",
     "https://data.statmt.org/wmt17/translation-task/rapid2016.tgz"),
)  # fmt: skip

_SEGMENT = re.compile(r"<seg.*?>(.*)</seg>.*?")


class SgmError(ValueError):
    """A test-set file that is not WMT's SGML; the message names the file."""


def read_sgm(path: str | Path) -> list[str]:
    """The segments of one WMT SGML file, in order (see the module docstring)."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise SgmError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    out = [
        re.sub(r"\s+", " ", _SEGMENT.sub(r"\1", line).strip())
        for line in lines
        if line.startswith("<seg ")
    ]
    if not out:
        raise SgmError(f"{path} holds no <seg> line: it is not a WMT SGML test-set file")
    return out


def find(root: str | Path, name: str) -> Path | None:
    """The file called `name` under `root` (any depth: archives extract into folders of
    their own), the shortest path first; None when there is none."""
    found = sorted(Path(root).rglob(name), key=lambda p: (len(p.parts), str(p)))
    return found[0] if found else None
