"""Predictions files of task 4b (translation) for the tests of POST
/api/runs/<id>/predictions/ (test_translation_grading.py, test_translation_cheats.py)."""

from __future__ import annotations

import io
import tarfile

import numpy as np
import sacrebleu

from mlbench_worker.shared.evaluation.predictions import digest_of_text
from mlbench_worker.shared.translation_corpus import generated_pairs
from tests.api.predictions_bodies import npz

TASK = "transformer-wmt17"
SEED = 11
N = 40  # test sentences the runs are created with (test_examples)
SIGNATURE = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"


def pairs(seed: int = SEED, n: int = N) -> list[tuple[str, str]]:
    return generated_pairs(seed, "test", n)


def references(seed: int = SEED, n: int = N) -> list[str]:
    return [ref for _, ref in pairs(seed, n)]


def pieces(text: str) -> str:
    """`text` as SentencePiece-like pieces: "▁" before each word, words over three
    characters cut in two pieces, punctuation its own piece ("Haus." -> "▁Ha us .")."""
    out = []
    for word in text.split():
        tail = ""
        if word[-1] in ".,":
            word, tail = word[:-1], word[-1]
        out += ["▁" + word[:2], word[2:]] if len(word) > 3 else ["▁" + word]
        if tail:
            out.append(tail)
    return " ".join(out)


def text_file(lines: list[str], *, digest: str | None = None, step: int = 100) -> bytes:
    """A file of `lines` (pieces) for the generated set of SEED, N."""
    raw = np.frombuffer("\n".join(lines).encode("utf-8"), dtype=np.uint8)
    return npz(digest=digest or digest_of_text(references()), step=step, predicted_text=raw)


def raw_text_file(raw: bytes, digest: str | None = None) -> bytes:
    array = np.frombuffer(raw, dtype=np.uint8)
    return npz(digest=digest or digest_of_text(references()), predicted_text=array)


def direct_bleu(hypotheses: list[str], refs: list[str]) -> float:
    """sacrebleu called directly on plain-text hypotheses, as anyone would."""
    return float(sacrebleu.corpus_bleu(hypotheses, [refs]).score)


def newstest_archive(refs: list[str], sources: list[str] | None = None) -> bytes:
    """A small test.tgz in WMT17's layout: test/newstest2017-ende-{src.en,ref.de}.sgm in
    WMT's SGML (a <refset>/<doc> around one <seg id=...> line per sentence). Built by the
    tests: the real archive cannot be downloaded here."""
    sources = sources or [f"Sentence {i}." for i in range(len(refs))]

    def sgm(kind: str, lang: str, lines: list[str]) -> bytes:
        segs = "".join(f'<seg id="{i + 1}">{line}</seg>\n' for i, line in enumerate(lines))
        return (
            f'<{kind} setid="newstest2017" srclang="any" trglang="{lang}">\n'
            f'<doc sysid="ref" docid="test-doc" genre="news" origlang="en">\n<p>\n'
            f"{segs}</p>\n</doc>\n</{kind}>\n"
        ).encode()

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in (
            ("test/newstest2017-ende-src.en.sgm", sgm("srcset", "en", sources)),
            ("test/newstest2017-ende-ref.de.sgm", sgm("refset", "de", refs)),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()
