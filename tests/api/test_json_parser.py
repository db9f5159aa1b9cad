"""The API's JSON reader (api/parsers.py) reads every body as the standard library does:
orjson's answer is taken only where the two agree, DRF's parser reads the rest."""

import io
import json
import random

import pytest
from django.urls import get_resolver
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser
from rest_framework.test import APIClient

from mlbench_master.api.models import Metric
from mlbench_master.api.parsers import FastJSONParser
from mlbench_master.runs import lifecycle

# Bodies both readers accept, among them the ones where orjson alone would differ.
BODIES = [
    '[{"run_id": 1, "name": "loss", "value": 0.5, "metadata": {"step": 3, "epoch": 1.25}}]',
    '{"big": 18446744073709551616}',  # 2**64: orjson alone reads a float
    '{"small": -9223372036854775809}',  # below -2**63: orjson alone reads a float
    '{"id": 123456789012345678901234567890}',
    '{"long": 0.1234567890123456789012345}',
    '{"i64": 9223372036854775807, "u64": 18446744073709551615}',
    "[5e-324, 1.7976931348623157e308, -0.0, 0, -0, 1E5, 1e-400, 2.5e+3]",
    '{"a": 1, "a": 2}',
    '"caf\\u00e9 \\ud83d\\ude00 \\u0000 \\n \\"q\\""',
    ' \t\n[[], {}, [[{"x": [null, true, false]}]]] \n',
]


def read(parser, text: str, encoding: str = "utf-8"):
    return parser.parse(io.BytesIO(text.encode(encoding)), None, {"encoding": encoding})


def same(a, b) -> bool:
    """Equal values of equal types all the way down (1 == 1.0 is not enough)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return a.hex() == b.hex()
    return a == b


@pytest.mark.parametrize("text", BODIES)
def test_the_same_value_as_the_standard_library(text):
    assert same(read(FastJSONParser(), text), json.loads(text))


def test_float_spellings_read_to_the_same_bits():
    """Mantissas of up to 18 digits (longer ones go to the standard library) and exponents
    across the double range, as a numeric library would print them."""
    rng = random.Random(49)
    texts = []
    for _ in range(3000):
        digits = str(rng.randrange(1, 10**18))
        cut = rng.randrange(1, len(digits) + 1)
        texts.append(f"{digits[:cut]}.{digits[cut:] or '0'}e{rng.randrange(-330, 310)}")
    body = "[" + ", ".join(texts) + "]"
    assert same(read(FastJSONParser(), body), json.loads(body))


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[1,]",
        "NaN",
        "[1, Infinity]",
        '{"a": 1',
        "\ufeff[1]",  # a byte-order mark
        "[01]",
        "[1] [2]",
    ],
)
def test_refused_with_drfs_own_message(text):
    with pytest.raises(ParseError) as ours:
        read(FastJSONParser(), text)
    with pytest.raises(ParseError) as drfs:
        read(JSONParser(), text)
    assert str(ours.value.detail) == str(drfs.value.detail)


def test_invalid_utf8_refused_like_drf():
    bad = io.BytesIO(b'{"a": "\xff"}')
    with pytest.raises(ParseError) as ours:
        FastJSONParser().parse(bad, None, {"encoding": "utf-8"})
    with pytest.raises(ParseError) as drfs:
        JSONParser().parse(io.BytesIO(b'{"a": "\xff"}'), None, {"encoding": "utf-8"})
    assert str(ours.value.detail) == str(drfs.value.detail)


def test_another_charset_is_read_in_it():
    text = '{"name": "d\u00e9bit", "value": 1, "big": 18446744073709551616}'
    assert same(read(FastJSONParser(), text, "utf-16"), json.loads(text))


def test_a_64_bit_overflowing_integer_survives_a_metric_post(run, api):
    worker_client = APIClient()
    worker_client.credentials(HTTP_AUTHORIZATION=f"Token {lifecycle.worker_token(run)}")
    big = 2**70 + 1
    body = json.dumps({"run_id": run.pk, "name": "m", "value": 1.0, "metadata": {"big": big}})
    r = worker_client.post("/api/metrics/", data=body, content_type="application/json")
    assert r.status_code == 201, r.json()
    assert r.json()["metadata"] == {"big": big}
    got = api.get(f"/api/metrics/{run.pk}/?metric_type=run&details=1")
    assert got.status_code == 200, got.content[:300]
    (point,) = got.json()["m"]
    assert point["metadata"] == {"big": big}


def _nested(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


def test_metadata_nested_deeper_than_python_reads_is_refused(run, api):
    """orjson reads 1,024 levels, the standard library about 950 in a request: the
    ingest's own check of the metadata refuses what the standard library could not read."""
    worker_client = APIClient()
    worker_client.credentials(HTTP_AUTHORIZATION=f"Token {lifecycle.worker_token(run)}")
    body = f'{{"run_id": {run.pk}, "name": "m", "value": 1, "metadata": {_nested(1000)}}}'
    r = worker_client.post("/api/metrics/", data=body, content_type="application/json")
    assert r.status_code == 400, r.content[:300]
    assert "nested too deeply" in r.json()["detail"]
    assert not Metric.objects.filter(run=run).exists()


def test_a_field_the_point_does_not_have_is_ignored_however_deep(run):
    """The one body orjson reads that the standard library could not: nesting beyond ~950
    levels in a field the ingest does not read. It is dropped as any unknown field is."""
    worker_client = APIClient()
    worker_client.credentials(HTTP_AUTHORIZATION=f"Token {lifecycle.worker_token(run)}")
    body = f'{{"run_id": {run.pk}, "name": "m", "value": 1, "other": {_nested(1000)}}}'
    r = worker_client.post("/api/metrics/", data=body, content_type="application/json")
    assert r.status_code == 201, r.content[:300]
    assert "other" not in r.json()
    assert Metric.objects.get(run=run).metadata == {}


def test_only_the_metric_ingest_reads_with_orjson():
    """Views that store what they are sent must never hold a value the API cannot write
    back, so they keep DRF's reader, which refuses nesting beyond the standard library's
    reach (api/parsers.py)."""

    def views(patterns):
        for p in patterns:
            if hasattr(p, "url_patterns"):
                yield from views(p.url_patterns)
            elif hasattr(p.callback, "cls"):
                yield p.callback.cls

    fast = {v.__name__ for v in views(get_resolver().url_patterns)
            if any(issubclass(c, FastJSONParser) for c in v.parser_classes)}  # fmt: skip
    assert fast == {"MetricList"}
