"""The references of a translation task's test set, as the evaluator holds them itself.

- generated: the target sides of the generated corpus's test split, regenerated from the
  run's seed (shared/translation_corpus.py, the same function the worker draws them with);
- newstest2017 English-German: the German references of WMT17's test set, read only from
  WMT's ``test.tgz`` under ``<data dir>/wmt17/``, whose MD5 sacrebleu's own table of test
  sets publishes (shared/wmt17.py), the archive checked before its member
  ``test/newstest2017-ende-ref.de.sgm`` is read. The SGML is parsed by shared/wmt17.py's
  reader, the one the worker reads the sources with, which reads it as sacrebleu does.

The plain ``.sgm`` file that the worker extracts beside the archive is never read here: no
checksum of it is published, so a grade cannot rest on it (someone could edit the
references). A data directory that holds only the extracted files is refused with a
message saying to keep the archive, like epsilon's plain file (file_labels.py). The tests
build small archives in WMT's format with their own MD5 (`md5=`) and say so; the real
archive cannot be downloaded on the machines this was written on.
"""

from __future__ import annotations

import tarfile
import tempfile
from pathlib import Path

from mlbench_worker.shared import data_files, wmt17
from mlbench_worker.shared.evaluation.file_labels import LabelsUnavailable
from mlbench_worker.shared.translation_corpus import generated_pairs

REFERENCE_MEMBER = f"test/{wmt17.TEST_REFERENCE}"
# The English side, which the audit of a translation model feeds it (translation_audit.py).
SOURCE_MEMBER = f"test/{wmt17.TEST_SOURCE}"


def generated(seed: int, size: int) -> list[str]:
    """The first `size` references of the generated test split for `seed`."""
    return [reference for _, reference in generated_pairs(seed, "test", size)]


def generated_sources(seed: int, size: int) -> list[str]:
    """The first `size` sources of the generated test split for `seed`."""
    return [source for source, _ in generated_pairs(seed, "test", size)]


def newstest2017(
    data_dir: str | Path, md5: str | None = None, member: str = REFERENCE_MEMBER
) -> list[str]:
    """newstest2017's German references (or, with `member` SOURCE_MEMBER, its English
    sources), in order, from the checksummed archive under `data_dir` (`md5`: the
    archive's, wmt17.TEST_ARCHIVE_MD5 unless given); LabelsUnavailable naming the problem
    when they cannot be had from it."""
    md5 = md5 or wmt17.TEST_ARCHIVE_MD5
    folder = Path(data_dir) / wmt17.FOLDER
    archive = folder / wmt17.TEST_ARCHIVE
    if not archive.is_file():
        plain = wmt17.find(folder, wmt17.TEST_REFERENCE) if folder.is_dir() else None
        why = (
            f"; {plain} is there, but no checksum of the extracted file is published, so the "
            "evaluator reads the references only from the archive: keep it beside them"
            if plain
            else ""
        )
        raise LabelsUnavailable(
            f"newstest2017's references need {archive} (WMT17's test set, MD5 {md5}, from "
            f"{wmt17.TEST_ARCHIVE_URL}){why}"
        )
    got = data_files.file_digest(archive, "md5")
    if got != md5:
        raise LabelsUnavailable(
            f"{archive} has the wrong checksum (MD5 {got}, expected {md5}): it is damaged or "
            "not WMT17's test set, so the evaluator will not read references from it"
        )
    try:
        with tarfile.open(archive, "r:gz") as tar:
            found = tar.extractfile(member)
            if found is None:
                raise KeyError(member)
            raw = found.read()
    except (tarfile.TarError, OSError, KeyError, EOFError) as exc:
        raise LabelsUnavailable(f"{archive} has no readable {member}: {exc}") from exc
    # wmt17.read_sgm reads a file: the member goes through a private temporary one.
    with tempfile.TemporaryDirectory(prefix="mlbench-refs-") as tmp:
        copy = Path(tmp) / Path(member).name
        copy.write_bytes(raw)
        try:
            return wmt17.read_sgm(copy)
        except wmt17.SgmError as exc:
            said = str(exc).replace(str(copy), f"{archive}:{member}")
            raise LabelsUnavailable(said) from None
