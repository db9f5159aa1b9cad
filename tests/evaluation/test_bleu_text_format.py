"""The predictions format's text member (translation): what it holds and what it refuses."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from mlbench_worker.shared.evaluation import predictions
from mlbench_worker.shared.evaluation.predictions import PredictionsRefused

DIGEST = predictions.digest_of_text(["Das Haus ist klein.", "Ich sehe es."])


def _raw(folder, text, name="p.npz"):
    """A file written with numpy alone, holding `text` as predicted_text."""
    path = folder / name
    np.savez(
        path,
        format=np.array(predictions.FORMAT),
        test_set_digest=np.array(DIGEST),
        step=np.array(5),
        epoch=np.array(1.0),
        elapsed=np.array(2.0),
        predicted_text=text,
    )
    return path


def test_lines_round_trip_as_utf8_bytes(tmp_path):
    lines = ["▁Das ▁Haus ▁ist ▁klein .", "", "▁Größe ▁über ▁alles"]
    path = predictions.write(
        tmp_path, test_set_digest=DIGEST, step=7, epoch=1, elapsed=3.5, predicted_text=lines
    )
    read = predictions.read(path)
    assert read.text == tuple(lines)
    held = read.arrays[predictions.TEXT]
    assert held.dtype == np.uint8 and held.ndim == 1
    assert held.tobytes() == "\n".join(lines).encode("utf-8")


def test_digest_of_text_is_sha256_of_joined_lines():
    refs = ["Das Haus ist klein.", "Ich sehe es."]
    expected = hashlib.sha256(b"Das Haus ist klein.\nIch sehe es.").hexdigest()
    assert predictions.digest_of_text(refs) == expected
    assert predictions.digest_of_text(refs[::-1]) != expected


def test_an_empty_array_is_one_empty_line(tmp_path):
    assert predictions.read(_raw(tmp_path, np.zeros(0, np.uint8))).text == ("",)


def test_the_documented_numpy_example_reads(tmp_path):
    hypotheses = ["▁Das ▁Haus ▁ist ▁klein .", "▁Ich ▁sehe ▁sie ."]
    text = np.frombuffer("\n".join(hypotheses).encode("utf-8"), dtype=np.uint8)
    assert predictions.read(_raw(tmp_path, text)).text == tuple(hypotheses)


def test_bytes_that_are_not_utf8_name_the_line_and_byte(tmp_path):
    raw = "▁a ▁b\n▁cd".encode() + b"\xff" + "\n▁e".encode()
    with pytest.raises(PredictionsRefused, match=r"not UTF-8: line 1, byte 5 .*0xff"):
        predictions.read(_raw(tmp_path, np.frombuffer(raw, np.uint8)))


@pytest.mark.parametrize(
    "char, code", [("\x00", "0000"), ("\r", "000D"), ("\t", "0009"), ("\x85", "0085")]
)
def test_control_characters_are_refused_naming_the_line(tmp_path, char, code):
    raw = f"▁ok\n▁bad{char}line".encode()
    with pytest.raises(PredictionsRefused, match=f"line 1 holds the control character U\\+{code}"):
        predictions.read(_raw(tmp_path, np.frombuffer(raw, np.uint8)))
    with pytest.raises(PredictionsRefused, match=f"U\\+{code}"):
        predictions.write(
            tmp_path, test_set_digest=DIGEST, step=1, epoch=0, elapsed=0,
            predicted_text=["▁ok", f"▁bad{char}"],
        )  # fmt: skip


def test_a_line_separator_is_refused(tmp_path):
    raw = "▁one\u2028▁two".encode()
    with pytest.raises(PredictionsRefused, match="U\\+2028"):
        predictions.read(_raw(tmp_path, np.frombuffer(raw, np.uint8)))


@pytest.mark.parametrize(
    "array",
    [
        np.array(["▁a", "▁b"]),  # numpy text
        np.frombuffer(b"abcd", np.uint8).astype(np.int64),  # integers, not bytes
        np.frombuffer(b"abcd", np.uint8).reshape(2, 2),  # not 1-D
        np.frombuffer(b"abcd", np.int8),  # signed bytes
    ],
    ids=["unicode", "int64", "2d", "int8"],
)
def test_wrong_dtype_or_shape_is_refused(tmp_path, array):
    with pytest.raises(PredictionsRefused, match="1-D uint8 array of UTF-8 bytes"):
        predictions.read(_raw(tmp_path, array))


def test_the_writer_refuses_one_string_for_a_list(tmp_path):
    with pytest.raises(PredictionsRefused, match="list of lines"):
        predictions.write(
            tmp_path, test_set_digest=DIGEST, step=1, epoch=0, elapsed=0, predicted_text="▁a"
        )
