"""Finds the tensors of an ONNX file whose bytes live in another file ("external data").

Why: onnxruntime reads such a tensor from the path the model names, relative to the working
directory when the model is handed over as bytes. A posted model could so make its scores
depend on any file of the master's working directory (settings, a database, a key) and
read it back through the audit's verdict, as often as it is posted again. The model
contract is one self-contained file, so model_audit.Model refuses any tensor with external
data before onnxruntime sees the model, wherever the tensor hides: the graph's initializers
(dense and sparse), a node's tensor attributes (Constant's value and any other), the
subgraphs of If, Loop and Scan, the model's functions and its training information. The
audit also runs in an empty working directory (audit_process.py): a tensor this reader
missed would find nothing to read.

Protobuf's wire format is read here directly, with the standard library only (the evaluator
does not depend on the onnx package), and only the fields that can hold a tensor are
opened; every other field is skipped by its length, so a 500 MB model costs milliseconds.
"""

from __future__ import annotations

# The messages that can hold a tensor, and for each the fields that hold one of them
# (field numbers of onnx.proto: ModelProto.graph = 7, GraphProto.initializer = 5, ...).
MODEL, GRAPH, NODE, ATTRIBUTE, TENSOR, SPARSE, FUNCTION, TRAINING = range(8)
HOLDS: dict[int, dict[int, int]] = {
    MODEL: {7: GRAPH, 20: TRAINING, 25: FUNCTION},
    GRAPH: {1: NODE, 5: TENSOR, 15: SPARSE},
    NODE: {5: ATTRIBUTE},
    ATTRIBUTE: {5: TENSOR, 6: GRAPH, 10: TENSOR, 11: GRAPH, 22: SPARSE, 23: SPARSE},
    SPARSE: {1: TENSOR, 2: TENSOR},
    FUNCTION: {7: NODE, 11: ATTRIBUTE},
    TRAINING: {1: GRAPH, 2: GRAPH},
    TENSOR: {},
}
TENSOR_NAME, TENSOR_EXTERNAL_DATA, TENSOR_DATA_LOCATION, EXTERNAL = 8, 13, 14, 1
MAX_DEPTH = 64  # messages inside messages: far more than any real model nests


class Broken(ValueError):
    """Bytes that are not a protobuf message (so not an ONNX model either)."""


def external_tensors(data: bytes) -> list[str]:
    """Each tensor of the ONNX model `data` that keeps its bytes in another file, as
    "'name' (in 'location')"; Broken when `data` is not a protobuf message."""
    found: list[str] = []
    _walk(memoryview(data), 0, len(data), MODEL, found, 0)
    return found


def _walk(data: memoryview, pos: int, end: int, kind: int, found: list[str], depth: int) -> None:
    if depth > MAX_DEPTH:
        raise Broken(f"messages nested deeper than {MAX_DEPTH} levels at byte {pos}")
    holds = HOLDS[kind]
    name, location, external = "", "", False
    while pos < end:
        field, wire, value, pos = _next_field(data, pos, end)
        if wire == 2 and field in holds:
            _walk(data, value[0], value[1], holds[field], found, depth + 1)
        elif kind == TENSOR and field == TENSOR_NAME and wire == 2:
            name = bytes(data[value[0] : value[1]]).decode("utf-8", "replace")[:80]
        elif kind == TENSOR and field == TENSOR_EXTERNAL_DATA and wire == 2:
            external = True  # even without data_location saying so: refused either way
            key, text = _entry(data, *value)
            location = text if key == "location" else location
        elif kind == TENSOR and field == TENSOR_DATA_LOCATION and wire == 0:
            external = external or value == EXTERNAL
    if external:
        found.append(f"{name!r} (in {location!r})" if location else repr(name))


def _entry(data: memoryview, pos: int, end: int) -> tuple[str, str]:
    """A StringStringEntryProto's key (field 1) and value (field 2)."""
    texts = {1: "", 2: ""}
    while pos < end:
        field, wire, value, pos = _next_field(data, pos, end)
        if wire == 2 and field in texts:
            texts[field] = bytes(data[value[0] : value[1]]).decode("utf-8", "replace")[:200]
    return texts[1], texts[2]


def _next_field(data: memoryview, pos: int, end: int) -> tuple[int, int, object, int]:
    """One field at `pos`: its number, wire type, value (an int, or the (start, stop) of
    its bytes), and where the next field starts."""
    start = pos
    key, pos = _varint(data, pos, end)
    field, wire = key >> 3, key & 7
    if field == 0:
        raise Broken(f"field number 0 at byte {start}")
    if wire == 0:
        value, pos = _varint(data, pos, end)
        return field, wire, value, pos
    if wire == 2:
        length, pos = _varint(data, pos, end)
        if pos + length > end:
            raise Broken(f"a field of {length} bytes at byte {start} runs past its message")
        return field, wire, (pos, pos + length), pos + length
    if wire in (1, 5):
        pos += 8 if wire == 1 else 4
        if pos > end:
            raise Broken(f"a fixed-size field at byte {start} runs past its message")
        return field, wire, None, pos
    if wire == 3:  # a group (old protobuf): parsers skip it to its end marker, and so do we
        return field, wire, None, _skip_group(data, pos, end, field, start)
    raise Broken(f"wire type {wire} at byte {start}")


def _skip_group(data: memoryview, pos: int, end: int, group: int, start: int) -> int:
    while pos < end:
        key, after = _varint(data, pos, end)
        if key & 7 == 4:
            if key >> 3 != group:
                raise Broken(f"a group opened at byte {start} ends with another's marker")
            return after
        pos = _next_field(data, pos, end)[3]
    raise Broken(f"a group opened at byte {start} never ends")


def _varint(data: memoryview, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while pos < end and shift < 70:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
    raise Broken(f"a number runs past its message at byte {pos}")
