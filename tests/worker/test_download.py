"""The data sets' one download (mlbench_worker/data/download.py), against a real HTTP server
on loopback: the whole file arrives under its name, and a failure leaves nothing behind."""

from __future__ import annotations

import hashlib
import http.server
import threading
from pathlib import Path

import pytest

from mlbench_worker.data import download

BODY = bytes(range(256)) * 5000  # 1.2 MiB: more than one chunk


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the standard library's name
        if self.path == "/archive.bin":
            self.send_response(200)
            self.send_header("Content-Length", str(len(BODY)))
            self.end_headers()
            self.wfile.write(BODY)
        elif self.path == "/cut.bin":  # says more than it sends, then hangs up
            self.send_response(200)
            self.send_header("Content-Length", str(len(BODY)))
            self.end_headers()
            self.wfile.write(BODY[:1000])
            self.close_connection = True
        else:
            self.send_error(404)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _left(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_the_file_arrives_whole_and_its_digest_is_checked_on_the_way(server, tmp_path):
    said: list[str] = []
    sha = hashlib.sha256(BODY).hexdigest()
    got = download.fetch(
        f"{server}/archive.bin", tmp_path / "a.bin", digest=("sha256", sha), say=said.append
    )
    assert got.read_bytes() == BODY and _left(tmp_path) == ["a.bin"]
    assert said == [f"downloading {server}/archive.bin (1.2 MiB)"]


def test_a_wrong_sha256_is_named_as_the_data_sets_publish_it_and_keeps_nothing(server, tmp_path):
    with pytest.raises(download.WrongDigest, match=r"wrong checksum \(SHA-256 [0-9a-f]{64}, "):
        download.fetch(f"{server}/archive.bin", tmp_path / "a.bin", digest=("sha256", "0" * 64))
    assert _left(tmp_path) == []


def test_a_wrong_digest_keeps_nothing(server, tmp_path):
    with pytest.raises(
        download.WrongDigest, match=r"wrong checksum \(MD5 [0-9a-f]{32}, expected 0{32}\)"
    ):
        download.fetch(f"{server}/archive.bin", tmp_path / "a.bin", digest=("md5", "0" * 32))
    assert _left(tmp_path) == []


@pytest.mark.parametrize("path", ["/missing.bin", "/cut.bin"])
def test_a_missing_or_cut_file_keeps_nothing_and_names_the_url(server, tmp_path, path):
    with pytest.raises(download.DownloadFailed, match=f"{server}{path}: "):
        download.fetch(f"{server}{path}", tmp_path / "a.bin", timeout=5)
    assert _left(tmp_path) == []


def test_an_older_whole_file_is_only_replaced_by_a_whole_one(server, tmp_path):
    (tmp_path / "a.bin").write_bytes(b"kept")
    with pytest.raises(download.DownloadFailed):
        download.fetch(f"{server}/cut.bin", tmp_path / "a.bin", timeout=5)
    assert (tmp_path / "a.bin").read_bytes() == b"kept" and _left(tmp_path) == ["a.bin"]
