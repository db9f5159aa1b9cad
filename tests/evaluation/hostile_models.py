"""ONNX models a hostile run could post, built with the onnx package: each fits task 1a's
contract (float32 N x 3 x 32 x 32 in, N x 10 scores out) and would, without the audit's
bounds, read a file, run without end or allocate without end."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import set_external_data

WEIGHTS = np.full((3 * 32 * 32, 10), 1 / 3072, np.float32)


def _model(nodes: list, initializers: list) -> bytes:
    graph = helper.make_graph(
        nodes,
        "hostile",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", 10])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _linear(out: str) -> tuple[list, list]:
    nodes = [
        helper.make_node("Flatten", ["x"], ["rows"]),
        helper.make_node("MatMul", ["rows", "w"], [out]),
    ]
    return nodes, [numpy_helper.from_array(WEIGHTS, "w")]


def _external(tensor: TensorProto, location: str) -> TensorProto:
    set_external_data(tensor, location=location, offset=0, length=len(tensor.raw_data))
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    return tensor


def linear() -> bytes:
    """The honest one: every score the mean pixel value."""
    return _model(*_linear("scores"))


def external_weights(location: str) -> bytes:
    """The linear model with its weights in the file `location` (WEIGHTS' bytes, so the
    model is valid where the file is there to be read)."""
    nodes, [weights] = _linear("scores")
    return _model(nodes, [_external(weights, location)])


def external_elsewhere(location: str, where: str) -> bytes:
    """The linear model plus a tensor kept in `location`, hidden in a Constant node's
    attribute (`where` = "constant") or in an If's branch ("subgraph")."""
    nodes, initializers = _linear("linear")
    hidden = _external(numpy_helper.from_array(np.zeros((1, 10), np.float32), "hidden"), location)
    constant = helper.make_node("Constant", [], ["offset"], value=hidden)
    if where == "subgraph":
        inner = helper.make_node("Constant", [], ["inner"], value=hidden)
        branch = helper.make_graph(
            [inner],
            "branch",
            [],
            [helper.make_tensor_value_info("inner", TensorProto.FLOAT, [1, 10])],
        )
        constant = helper.make_node(
            "If", ["always"], ["offset"], then_branch=branch, else_branch=branch
        )
        initializers.append(numpy_helper.from_array(np.array(True), "always"))
    nodes += [constant, helper.make_node("Add", ["linear", "offset"], ["scores"])]
    return _model(nodes, initializers)


def looping(power: int) -> bytes:
    """The linear model behind a Loop of N**power turns (N the batch's rows): a few hundred
    for the contract's check of three rows at power 6, without end for a whole batch."""
    nodes, initializers = _linear("linear")
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["go"], ["go_on"]),
            helper.make_node("Identity", ["v"], ["v_out"]),
        ],
        "turn",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("go", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v", TensorProto.FLOAT, ["N", 10]),
        ],
        [
            helper.make_tensor_value_info("go_on", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", TensorProto.FLOAT, ["N", 10]),
        ],
    )
    nodes += [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["n"]),
        helper.make_node("Pow", ["n", "power"], ["turns"]),
        helper.make_node("Loop", ["turns", "yes", "linear"], ["scores"], body=body),
    ]
    initializers += [
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array(power, np.int64), "power"),
        numpy_helper.from_array(np.array(True), "yes"),
    ]
    return _model(nodes, initializers)


def allocating() -> bytes:
    """The linear model plus a ConstantOfShape of N x 10 x 2**28 float32 (10 GiB for one
    row), reduced to N x 10 zeros."""
    nodes, initializers = _linear("linear")
    nodes += [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Slice", ["shape", "first", "second"], ["n"]),
        helper.make_node("Concat", ["n", "huge"], ["dims"], axis=0),
        helper.make_node(
            "ConstantOfShape",
            ["dims"],
            ["zeros"],
            value=numpy_helper.from_array(np.zeros(1, np.float32)),
        ),
        helper.make_node("ReduceMax", ["zeros"], ["nothing"], axes=[2], keepdims=0),
        helper.make_node("Add", ["linear", "nothing"], ["scores"]),
    ]
    initializers += [
        numpy_helper.from_array(np.array([0], np.int64), "first"),
        numpy_helper.from_array(np.array([1], np.int64), "second"),
        numpy_helper.from_array(np.array([10, 1 << 28], np.int64), "huge"),
    ]
    return _model(nodes, initializers)
