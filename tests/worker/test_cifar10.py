"""Our CIFAR-10 reader on small files written in the official format, good and damaged."""

import http.server
import pickle
import threading

import numpy as np
import pytest

from mlbench_worker.data import DataUnavailable
from mlbench_worker.tasks.cifar10 import reader
from mlbench_worker.training.errors import WorkerError

from .helpers import file_md5s, make_archive, make_cifar_folder


def test_parses_an_extracted_folder_and_checks_each_file(tmp_path):
    folder = make_cifar_folder(tmp_path, per_batch=20)
    arrays = reader.parse_folder(folder, file_md5s(folder))
    assert arrays.train_x.shape == (100, 3, 32, 32) and arrays.train_x.dtype == np.uint8
    assert arrays.test_x.shape == (20, 3, 32, 32)
    assert arrays.train_y.dtype == np.int64 and arrays.train_y.max() <= 9
    assert arrays.classes[0] == "airplane" and len(arrays.classes) == 10
    # Row layout: 1024 red, then green, then blue values; the first image round-trips.
    raw = pickle.loads((folder / "data_batch_1").read_bytes(), encoding="bytes")
    assert np.array_equal(arrays.train_x[0, 1].reshape(-1), raw[b"data"][0, 1024:2048])


def test_archive_is_verified_extracted_parsed_and_cached(tmp_path):
    src = make_cifar_folder(tmp_path / "src")
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    md5 = make_archive(src, data_dir / reader.ARCHIVE)
    arrays = reader.load(data_dir, allow_download=False, archive_md5=md5, file_md5=file_md5s(src))
    assert len(arrays.train_y) == 100
    assert (data_dir / reader.CACHE / "complete").is_file()
    # Second time from the cache, even with the archive gone.
    (data_dir / reader.ARCHIVE).unlink()
    again = reader.load(data_dir, allow_download=False)
    assert np.array_equal(again.train_x, arrays.train_x)


def test_wrong_archive_checksum_is_refused(tmp_path):
    src = make_cifar_folder(tmp_path / "src")
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    make_archive(src, data_dir / reader.ARCHIVE)
    with pytest.raises(WorkerError, match="wrong checksum") as err:
        reader.load(data_dir, allow_download=False)  # the official MD5 cannot match
    assert reader.ARCHIVE_MD5 in str(err.value)


def test_wrong_file_checksum_is_refused(tmp_path):
    folder = make_cifar_folder(tmp_path)
    with pytest.raises(WorkerError, match="data_batch_1 has the wrong checksum"):
        reader.parse_folder(folder)  # official per-file MD5s


def test_corrupt_batch_file_names_the_file(tmp_path):
    folder = make_cifar_folder(tmp_path)
    path = folder / "data_batch_3"
    path.write_bytes(path.read_bytes()[:500])  # truncated
    with pytest.raises(WorkerError, match="data_batch_3 is corrupt"):
        reader.parse_folder(folder, file_md5=None)


def test_batch_with_wrong_shape_is_corrupt(tmp_path):
    folder = make_cifar_folder(tmp_path)
    (folder / "test_batch").write_bytes(
        pickle.dumps({b"data": np.zeros((4, 100), np.uint8), b"labels": [1, 2, 3, 4]}, protocol=2)
    )
    with pytest.raises(WorkerError, match="test_batch is corrupt.*N x 3072"):
        reader.parse_folder(folder, file_md5=None)


def test_reader_refuses_pickles_that_would_run_code(tmp_path):
    import os

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    path = tmp_path / "data_batch_1"
    path.write_bytes(pickle.dumps({b"data": Evil()}, protocol=2))
    with pytest.raises(WorkerError, match="corrupt.*unexpected object"):
        reader.read_batch(path)


class _QuietFiles(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _serve(folder):
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a, **k: _QuietFiles(*a, directory=str(folder), **k)
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_downloads_when_absent(tmp_path):
    src = make_cifar_folder(tmp_path / "src")
    served = tmp_path / "served"
    served.mkdir()
    md5 = make_archive(src, served / reader.ARCHIVE)
    server = _serve(served)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/{reader.ARCHIVE}"
        arrays = reader.load(tmp_path / "data", url=url, archive_md5=md5, file_md5=file_md5s(src))
    finally:
        server.shutdown()
    assert len(arrays.test_y) == 20
    assert not list((tmp_path / "data").glob("*.part*"))


def test_failed_download_says_how_to_place_the_files(tmp_path):
    with pytest.raises(DataUnavailable) as err:
        reader.load(tmp_path, url="http://127.0.0.1:9/nothing.tar.gz")
    message = str(err.value)
    assert "Could not download" in message
    assert "by hand" in message and str(tmp_path / reader.ARCHIVE) in message
    assert not list(tmp_path.glob("*.part*"))
