"""Task 4b's real-data path on SMALL files written here in WMT17's formats: no registry
ships WMT17 and nothing downloads from the internet on these machines, so the tests write
parallel plain-text training files under their real names and newstest2017's two SGML files
(sentences of the generated corpus in them: the formats are real, the text is not WMT's).
The download of the test archive is tried against a real HTTP server on loopback whose
archive is not the official one: refused by its MD5, nothing kept."""

from __future__ import annotations

import http.server
import tarfile
import threading
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm

from mlbench_worker.data import DataUnavailable
from mlbench_worker.shared import translation_corpus, wmt17
from mlbench_worker.tasks.wmt import reader, tokens
from mlbench_worker.training.errors import WorkerError

from .helpers import metrics_file, mpirun, points

PAIRS = 600
SEGMENTS = 20


def write_sgm(path: Path, lines: list[str], lang: str) -> None:
    """One WMT test-set file: a srcset or refset with one document of numbered segments."""
    head = f'<srcset setid="newstest2017" srclang="any">\n<doc sysid="ref" docid="t-1" genre="news" origlang="{lang}">\n'  # noqa: E501
    body = "".join(f'<p>\n<seg id="{i}">{line}</seg>\n</p>\n' for i, line in enumerate(lines, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(head + body + "</doc>\n</srcset>\n", encoding="utf-8")


def write_corpus(data_dir: Path, pairs: int = PAIRS, segments: int = SEGMENTS) -> Path:
    """News Commentary v12's file pair and newstest2017 as they extract, under data_dir."""
    folder = data_dir / wmt17.FOLDER
    training = folder / "training"
    training.mkdir(parents=True)
    train = translation_corpus.generated_pairs(11, "train", pairs)
    en, de = wmt17.TRAINING[2][:2]
    (training / en).write_text("".join(f"{a}\n" for a, _ in train) + "\n", encoding="utf-8")
    (training / de).write_text("".join(f"{b}\n" for _, b in train) + "\n", encoding="utf-8")
    test = translation_corpus.generated_pairs(11, "test", segments)
    write_sgm(folder / "test" / wmt17.TEST_SOURCE, [a for a, _ in test], "en")
    write_sgm(folder / "test" / wmt17.TEST_REFERENCE, [b for _, b in test], "en")
    return folder


def test_the_reader_takes_the_pairs_and_the_segments_as_sacrebleu_reads_them(tmp_path):
    folder = write_corpus(tmp_path)
    source = folder / "test" / wmt17.TEST_SOURCE
    text = source.read_text().replace('<seg id="2">', '<seg id="2">  A &amp;  B ')
    source.write_text(text)
    corpus = reader.load(tmp_path, allow_download=False)
    assert len(corpus.train) == PAIRS and len(corpus.test) == SEGMENTS
    assert corpus.train[0] == translation_corpus.generated_pairs(11, "train", 1)[0]
    assert corpus.test[1][0].startswith("A &amp; B ")  # entities kept, blanks made one
    assert reader.load(tmp_path, train_pairs=50, allow_download=False).train == corpus.train[:50]


def test_files_that_are_not_the_formats_are_refused_naming_them(tmp_path):
    folder = write_corpus(tmp_path)
    (folder / "test" / wmt17.TEST_REFERENCE).write_text("no segments here\n")
    with pytest.raises(WorkerError, match="holds no <seg> line"):
        reader.load(tmp_path, allow_download=False)
    write_sgm(folder / "test" / wmt17.TEST_REFERENCE, ["Nur eins."], "en")
    with pytest.raises(WorkerError, match="20 segments and .* 1: they are not one test set"):
        reader.load(tmp_path, allow_download=False)
    write_sgm(folder / "test" / wmt17.TEST_REFERENCE, ["x"] * SEGMENTS, "en")
    de = folder / "training" / wmt17.TRAINING[2][1]
    de.write_text("eine Zeile\n")
    with pytest.raises(WorkerError, match="not a parallel pair"):
        reader.load(tmp_path, allow_download=False)
    for name in (wmt17.TRAINING[2][0], wmt17.TRAINING[2][1]):
        (folder / "training" / name).unlink()
    with pytest.raises(DataUnavailable, match="no WMT17 training files"):
        reader.load(tmp_path, allow_download=False)


class _Archive(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:  # noqa: N802 - the standard library's name
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


def _small_test_archive(where: Path) -> Path:
    write_sgm(where / "test" / wmt17.TEST_SOURCE, ["One."], "en")
    write_sgm(where / "test" / wmt17.TEST_REFERENCE, ["Eins."], "en")
    archive = where / "made.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(where / "test", arcname="test")
    return archive


def test_a_downloaded_archive_with_the_wrong_checksum_is_refused_and_nothing_is_kept(
    tmp_path, monkeypatch
):
    _Archive.body = _small_test_archive(tmp_path / "made").read_bytes()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Archive)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("MLBENCH_WMT17_URL", f"http://127.0.0.1:{httpd.server_address[1]}/t")
        data = tmp_path / "data"
        with pytest.raises(WorkerError, match=r"wrong checksum \(MD5 [0-9a-f]{32}, expected "
                           + wmt17.TEST_ARCHIVE_MD5):  # fmt: skip
            reader.load(data)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert sorted(p.name for p in (data / wmt17.FOLDER).iterdir()) == []


def test_a_hand_placed_archive_with_the_wrong_checksum_is_refused_before_extraction(tmp_path):
    folder = tmp_path / "data" / wmt17.FOLDER
    folder.mkdir(parents=True)
    (folder / wmt17.TEST_ARCHIVE).write_bytes(_small_test_archive(tmp_path / "made").read_bytes())
    with pytest.raises(WorkerError, match="wrong checksum .* not WMT17's test archive"):
        reader.load(tmp_path / "data", allow_download=False)
    assert sorted(p.name for p in folder.iterdir()) == [wmt17.TEST_ARCHIVE]


def test_missing_files_without_a_download_say_how_to_place_them(tmp_path):
    with pytest.raises(DataUnavailable, match="newstest2017 is not in .* --dataset synthetic"):
        reader.load(tmp_path, allow_download=False)


@pytest.mark.mpi
def test_two_ranks_train_the_tokeniser_once_cache_their_own_shards_and_load_them_again(tmp_path):
    data = tmp_path / "data"
    write_corpus(data)
    args = [
        "-m", "mlbench_worker", "transformer-wmt17", "--model", "transformer-small",
        "--dataset", "wmt17", "--batch-size", "512", "--threads", "1", "--max-epochs", "1",
        "--data-dir", str(data), "--metrics-file", str(tmp_path / "m.jsonl"),
    ]  # fmt: skip
    proc = mpirun(2, args, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "SYNTHETIC" not in proc.stdout
    summary, metrics = metrics_file(tmp_path / "m.jsonl")
    assert summary["dataset"] == "wmt17" and summary["config"]["test_sentences"] == SEGMENTS
    assert summary["config"]["train_pairs"] == PAIRS and len(points(metrics, "val_bleu")) == 1
    cache = data / wmt17.FOLDER / tokens.CACHE
    models = sorted(cache.glob("spm-*.model"))
    shards = sorted(cache.glob("shard-*.npz"))
    assert len(models) == 1 and [s.name.rsplit("-", 1)[1] for s in shards] == [
        "0of2.npz", "1of2.npz",
    ]  # fmt: skip
    # Each rank's shard holds its half of the pairs, in order, as the cached model encodes.
    sp = spm.SentencePieceProcessor(model_file=str(models[0]))
    train = translation_corpus.generated_pairs(11, "train", PAIRS)
    for rank, shard in enumerate(shards):
        with np.load(shard) as saved:
            at, ids = saved["tgt_offsets"], saved["tgt"]
            half = train[rank * PAIRS // 2 : (rank + 1) * PAIRS // 2]
            assert len(at) - 1 == len(half)
            for i in (0, len(half) - 1):
                row = ids[at[i] : at[i + 1]].tolist()
                assert row[-1] == tokens.EOS and sp.decode(row[:-1]) == half[i][1]
    # A second run finds both and trains nothing: the files are left as they were.
    stamps = {p: p.stat().st_mtime_ns for p in [*models, *shards]}
    again = mpirun(2, [*args[:-1], str(tmp_path / "m2.jsonl")], timeout=300)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert {p: p.stat().st_mtime_ns for p in [*models, *shards]} == stamps
