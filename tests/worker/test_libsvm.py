"""The LIBSVM reader and the epsilon cache: formats, errors with file and line, labels, the
cache's reuse and invalidation, concurrent ranks, the download and its checksum, and reading
one rank's rows without holding the whole set."""

from __future__ import annotations

import bz2
import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from mlbench_worker.data import DataUnavailable, libsvm
from mlbench_worker.tasks.epsilon import reader
from mlbench_worker.training.errors import WorkerError

from .helpers import REPO

# Five rows of six features, with zeros in different places, and labels as -1/+1.
X = np.array(
    [
        [0.5, 0.0, 1.25, 0.0, 0.0, -2.0],
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        [0.0, -0.125, 0.0, 0.0, 7.5, 0.0],
        [0.0, 0.0, 0.0, 1e-7, 0.0, 1.0],
    ],
    dtype=np.float32,
)
Y = np.array([1, -1, -1, 1, 1], dtype=np.float32)


def dense_text(x: np.ndarray, y: np.ndarray, labels: str = "+-1") -> str:
    """Every feature written, zeros included (epsilon's own layout)."""
    lines = []
    for row, label in zip(x, y, strict=True):
        tag = ("1" if label > 0 else "0") if labels == "0/1" else ("+1" if label > 0 else "-1")
        lines.append(tag + " " + " ".join(f"{j + 1}:{v:.9g}" for j, v in enumerate(row)))
    return "\n".join(lines) + "\n"


def sparse_text(x: np.ndarray, y: np.ndarray) -> str:
    """Only non-zero features, with comments, a blank line and Windows line ends mixed in."""
    lines = ["# written by the test", ""]
    for i, (row, label) in enumerate(zip(x, y, strict=True)):
        pairs = " ".join(f"{j + 1}:{row[j]:.9g}" for j in np.flatnonzero(row))
        line = f"{int(label)} {pairs}".rstrip()
        lines.append(line + ("  # a comment" if i == 2 else ""))
    return "\r\n".join(lines) + "\r\n"


def test_dense_sparse_and_bz2_files_read_to_identical_arrays(tmp_path):
    (tmp_path / "dense").write_text(dense_text(X, Y))
    (tmp_path / "sparse").write_bytes(sparse_text(X, Y).encode())
    (tmp_path / "sparse.bz2").write_bytes(bz2.compress(sparse_text(X, Y).encode()))
    (tmp_path / "zero-one").write_text(dense_text(X, Y, labels="0/1"))
    for name in ("dense", "sparse", "sparse.bz2", "zero-one"):
        x, y = libsvm.read(tmp_path / name, 6)
        assert x.dtype == np.float32 and y.dtype == np.float32, name
        assert np.array_equal(x, X), name
        assert np.array_equal(y, Y), name  # 0/1 labels come back as -1/+1


def test_the_cache_holds_the_same_arrays_and_is_a_plain_npy(tmp_path):
    (tmp_path / "epsilon_normalized.bz2").write_bytes(bz2.compress(sparse_text(X, Y).encode()))
    (tmp_path / "epsilon_normalized.t").write_text(dense_text(X[:3], Y[:3], labels="0/1"))
    said = []
    infos = reader.prepare(tmp_path, features=6, allow_download=False, say=said.append)
    assert (infos["train"].rows, infos["test"].rows) == (5, 3)
    assert (infos["train"].labels, infos["test"].labels) == ("+-1", "0/1")
    assert infos["train"].source == "epsilon_normalized.bz2"
    assert np.array_equal(np.load(tmp_path / "epsilon-npy" / "train_x.npy"), X)
    assert np.array_equal(np.load(tmp_path / "epsilon-npy" / "test_y.npy"), Y[:3])
    x, y = reader.read_rows(tmp_path, "train", np.array([1, 3, 4]), block_rows=2)
    assert np.array_equal(x, X[[1, 3, 4]]) and np.array_equal(y, Y[[1, 3, 4]])
    assert sum("converting" in line for line in said) == 2


@pytest.mark.parametrize(
    "bad_line, why",
    [
        ("1 1:0.5 3:abc", "could not convert string to float"),
        ("1 0:0.5", "indices start at 1"),
        ("1 3:1 2:1", "increasing and unique"),
        ("1 2:1 2:1", "increasing and unique"),
        ("1 2", "malformed line"),
        ("2 1:1", "label 2 is not -1/+1 or 0/1"),
        ("1 4:inf", "not a finite number"),
        ("-1 7:1", "larger than 6"),
    ],
)
def test_malformed_lines_are_named_by_file_and_line(tmp_path, bad_line, why):
    lines = dense_text(X, Y).splitlines()
    lines.insert(3, "# a comment counts as a line")
    lines.insert(5, bad_line)  # line 6 of the file
    path = tmp_path / "broken.bz2"
    path.write_bytes(bz2.compress(("\n".join(lines) + "\n").encode()))
    with pytest.raises(libsvm.LibsvmError) as raised:
        libsvm.read(path, 6)
    message = str(raised.value)
    assert message.startswith(f"{path}, line 6:"), message
    assert why in message and repr(bad_line) in message


def test_line_numbers_count_across_chunks(tmp_path):
    good = dense_text(np.tile(X, (200, 1)), np.tile(Y, 200))  # 1,000 lines, many chunks
    path = tmp_path / "long"
    path.write_text(good + "1 1:x\n")
    with pytest.raises(libsvm.LibsvmError, match=r", line 1001: malformed line"):
        for _ in libsvm.read_chunks(path, 6, chunk_bytes=1000):
            pass


def test_a_file_with_fewer_features_or_mixed_labels_is_refused(tmp_path):
    narrow = tmp_path / "narrow"
    narrow.write_text(dense_text(X[:, :5], Y))
    with pytest.raises(libsvm.LibsvmError, match=r"has 5 features .* expected 6"):
        libsvm.read(narrow, 6)
    mixed = tmp_path / "mixed"
    mixed.write_text("-1 6:1\n1 1:1\n0 2:1\n")
    with pytest.raises(libsvm.LibsvmError, match=r"mixes labels -1 \(first on line 1\) and 0 "):
        libsvm.read(mixed, 6)


def test_a_truncated_bz2_file_is_reported(tmp_path):
    whole = bz2.compress(dense_text(np.tile(X, (50, 1)), np.tile(Y, 50)).encode())
    path = tmp_path / "epsilon_normalized.bz2"
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(libsvm.LibsvmError, match="cannot be read"):
        libsvm.read(path, 6)


def _write_pair(folder: Path) -> None:
    (folder / "epsilon_normalized").write_text(dense_text(X, Y))
    (folder / "epsilon_normalized.t").write_text(dense_text(X[:2], Y[:2]))


def test_the_cache_is_reused_and_rebuilt_when_its_source_changes(tmp_path):
    _write_pair(tmp_path)
    reader.prepare(tmp_path, features=6, allow_download=False, say=lambda _m: None)
    cached = tmp_path / "epsilon-npy" / "train_x.npy"
    first = cached.stat().st_mtime_ns
    said = []
    again = reader.prepare(tmp_path, features=6, allow_download=False, say=said.append)
    assert said == [] and cached.stat().st_mtime_ns == first  # not parsed again
    assert again["train"].rows == 5

    source = tmp_path / "epsilon_normalized"
    source.write_text(dense_text(X, Y) + "1 6:1\n")  # one more row
    os.utime(source, ns=(time.time_ns(), time.time_ns() + 10**9))
    changed = reader.prepare(tmp_path, features=6, allow_download=False, say=said.append)
    assert changed["train"].rows == 6 and changed["test"].rows == 2
    assert [m for m in said if "converting" in m] == [
        f"epsilon: converting {source} to {tmp_path / 'epsilon-npy'} "
        "(once; later runs read the cache)"
    ]

    source.unlink()  # the text may be deleted once converted
    assert reader.prepare(tmp_path, features=6, allow_download=False)["train"].rows == 6
    # ... but a different file put in its place is converted.
    (tmp_path / "epsilon_normalized.bz2").write_bytes(
        bz2.compress(dense_text(X[:4], Y[:4]).encode())
    )
    assert reader.prepare(tmp_path, features=6, allow_download=False)["train"].rows == 4


def test_missing_files_without_download_say_how_to_place_them(tmp_path):
    with pytest.raises(DataUnavailable) as raised:
        reader.prepare(tmp_path, features=6, allow_download=False)
    message = str(raised.value)
    assert "epsilon_normalized" in message and "copy them to" in message
    assert "--dataset synthetic" in message


_CONCURRENT = """
import sys
from mlbench_worker.tasks.epsilon import reader
reader.prepare(sys.argv[1], features=6, allow_download=False)
"""


def test_ranks_preparing_at_once_convert_only_once(tmp_path):
    _write_pair(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CONCURRENT, str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(3)
    ]
    outputs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    converted = sum(out.count("epsilon: converting") for out, _ in outputs)
    assert converted == 2  # train and test, once each, by whichever process came first
    assert np.array_equal(np.load(tmp_path / "epsilon-npy" / "train_x.npy"), X)
    assert not [p for p in (tmp_path / "epsilon-npy").iterdir() if p.name.startswith(".")]


class _Files(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def file_server(tmp_path):
    """A real HTTP server on 127.0.0.1 serving tmp_path/served."""
    served = tmp_path / "served"
    served.mkdir()
    handler = lambda *a, **k: _Files(*a, directory=str(served), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield served, f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def test_download_checks_the_sha256_then_converts(tmp_path, file_server):
    served, url = file_server
    payloads = {
        "epsilon_normalized.bz2": bz2.compress(dense_text(X, Y).encode()),
        "epsilon_normalized.t.bz2": bz2.compress(dense_text(X[:2], Y[:2]).encode()),
    }
    for name, data in payloads.items():
        (served / name).write_bytes(data)
    sums = {name: hashlib.sha256(data).hexdigest() for name, data in payloads.items()}
    data_dir = tmp_path / "data"

    wrong = dict(sums, **{"epsilon_normalized.bz2": "0" * 64})
    with pytest.raises(WorkerError, match=r"wrong checksum \(SHA-256 [0-9a-f]{64}, expected 0{64}"):
        reader.prepare(data_dir, features=6, url_base=url, checksums=wrong, say=lambda _m: None)
    assert not list(data_dir.glob("epsilon_normalized*"))  # nothing half-downloaded is kept

    said = []
    infos = reader.prepare(data_dir, features=6, url_base=url, checksums=sums, say=said.append)
    assert (infos["train"].rows, infos["test"].rows) == (5, 2)
    assert (data_dir / "epsilon_normalized.bz2").read_bytes() == payloads["epsilon_normalized.bz2"]
    assert any(
        line.startswith(f"epsilon: downloading {url}epsilon_normalized.bz2") for line in said
    )


def test_an_unreachable_server_means_unavailable_with_placement_help(tmp_path):
    with pytest.raises(DataUnavailable) as raised:
        reader.prepare(tmp_path, features=6, url_base="http://127.0.0.1:9/", say=lambda _m: None)
    message = str(raised.value)
    assert message.startswith("Could not download epsilon from http://127.0.0.1:9/")
    assert "To place it by hand" in message
    assert not list(tmp_path.glob("*.part*"))


_RESIDENT = """
import json, resource, sys
import numpy as np
from mlbench_worker.tasks.epsilon import reader

def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM"):
            return int(line.split()[1]) * 1024

before = hwm()
mine = np.arange(int(sys.argv[2]), int(sys.argv[3]), 4)  # a quarter of the rows
x, y = reader.read_rows(sys.argv[1], "train", mine)
print(json.dumps({"grew": hwm() - before, "shard": x.nbytes, "sum": float(x.sum())}))
"""


def test_a_rank_reads_its_rows_without_holding_the_whole_set(tmp_path):
    rows, features = 16_384, 2000  # a 131 MB cache
    writer = reader.CacheWriter(tmp_path, "train", features)
    rng = np.random.default_rng(0)
    for _ in range(rows // 2048):
        writer.append(rng.random((2048, features), dtype=np.float32), np.ones(2048, np.float32))
    writer.commit(None)
    out = subprocess.run(
        [sys.executable, "-c", _RESIDENT, str(tmp_path), "1", str(rows)],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    expected = np.load(tmp_path / "epsilon-npy" / "train_x.npy", mmap_mode="r")[1::4]
    assert result["sum"] == pytest.approx(float(expected.sum()), rel=1e-6)
    whole = rows * features * 4
    # Its quarter plus one mapped block (16 MB) and slack, far from the 131 MB it maps.
    assert result["grew"] < result["shard"] + 2 * reader.BLOCK_ROWS * features * 4, result
    assert result["grew"] < 0.6 * whole, result
    info = json.loads((tmp_path / "epsilon-npy" / "train.json").read_text())
    assert (info["rows"], info["features"], info["source"]) == (rows, features, None)
