"""Builders of hostile model files and checks shared by the hardening tests.

A *jail* is a working directory holding ``etc/secret`` (bytes no response may
ever contain) and a model repository ``repo/``; the server runs with the jail
as its working directory, where ONNX Runtime would resolve a relative path.
"""

from __future__ import annotations

import contextlib
import os
import pathlib

import httpx
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .models import IR_VERSION, OPSET, mlp  # noqa: F401 (mlp: used by the tests)

SECRET = b"FLOWSERVE-SECRET-7f3a9c-" + bytes(range(200, 232))


def plant_secret(jail: pathlib.Path) -> pathlib.Path:
    """``jail/etc/secret`` holding ``SECRET``; its path."""
    (jail / "etc").mkdir(parents=True, exist_ok=True)
    (jail / "etc" / "secret").write_bytes(SECRET)
    return jail / "etc" / "secret"


def leaked(payload: bytes) -> bool:
    """True when ``payload`` holds the secret, or any 8-byte run of it."""
    return any(SECRET[i:i + 8] in payload for i in range(len(SECRET) - 7))


def external_tensor(name: str, dtype: int, length: int, location: str) -> TensorProto:
    tensor = TensorProto(name=name, data_type=dtype, dims=[length])
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return tensor


def sparse_external_model(location: str, length: int = len(SECRET)) -> onnx.ModelProto:
    """``y = x + s`` with ``s`` a UINT8 sparse initializer whose values live in ``location``."""
    values = external_tensor("s", TensorProto.UINT8, length, location)
    indices = numpy_helper.from_array(np.arange(length, dtype=np.int64), "s_indices")
    sparse = helper.make_sparse_tensor(values, indices, [length])
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "s"], ["y"])], "sparse",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [length])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [length])],
        sparse_initializer=[sparse])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                             ir_version=IR_VERSION)


def constant_attribute_model(location: str, sparse: bool,
                             length: int = len(SECRET)) -> onnx.ModelProto:
    """``y = x + Constant`` whose ``value`` (or ``sparse_value``) attribute is external."""
    tensor = external_tensor("c", TensorProto.UINT8, length, location)
    if sparse:
        indices = numpy_helper.from_array(np.arange(length, dtype=np.int64), "c_indices")
        constant = helper.make_node("Constant", [], ["c"],
                                    sparse_value=helper.make_sparse_tensor(tensor, indices, [length]))
    else:
        constant = helper.make_node("Constant", [], ["c"], value=tensor)
    graph = helper.make_graph(
        [constant, helper.make_node("Add", ["x", "c"], ["y"])], "constant",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [length])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [length])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                             ir_version=IR_VERSION)


def write_model(folder: pathlib.Path, model: onnx.ModelProto) -> pathlib.Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def good_repository(root: pathlib.Path) -> pathlib.Path:
    """``root`` with the one healthy model ``good`` (an MLP, version 1)."""
    write_model(root / "good" / "1", mlp((4, 8, 3), seed=3))
    return root


@contextlib.contextmanager
def working_directory(path: pathlib.Path):
    previous = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


def assert_alive(url: str, ready: bool = True) -> None:
    """The server answers live (and, when asked, ready) within a few seconds."""
    with httpx.Client(base_url=url, timeout=10) as client:
        assert client.get("/v2/health/live").json() == {"live": True}
        if ready:
            assert client.get("/v2/health/ready").status_code == 200


def good_infer(url: str) -> httpx.Response:
    body = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
    return httpx.post(f"{url}/v2/models/good/infer", json=body, timeout=30)


def subgraph_model(location: str, length: int = len(SECRET)) -> onnx.ModelProto:
    """``y = If(cond, then: x + Constant(external), else: x)``."""
    branch_out = helper.make_tensor_value_info("t", TensorProto.UINT8, [length])
    then = helper.make_graph(
        [helper.make_node("Constant", [], ["c"],
                          value=external_tensor("c", TensorProto.UINT8, length, location)),
         helper.make_node("Add", ["x", "c"], ["t"])], "then", [], [branch_out])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "else", [],
                              [branch_out])
    graph = helper.make_graph(
        [helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)], "if",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [length]),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [length])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                             ir_version=IR_VERSION)


def function_model(location: str, length: int = len(SECRET)) -> onnx.ModelProto:
    """``y = local.AddSecret(x)``, a local function whose body holds an external Constant."""
    body = [helper.make_node("Constant", [], ["c"],
                             value=external_tensor("c", TensorProto.UINT8, length, location)),
            helper.make_node("Add", ["a", "c"], ["b"])]
    function = helper.make_function("local", "AddSecret", ["a"], ["b"], body,
                                    [helper.make_opsetid("", OPSET)])
    graph = helper.make_graph(
        [helper.make_node("AddSecret", ["x"], ["y"], domain="local")], "function",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [length])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [length])])
    return helper.make_model(graph, functions=[function], ir_version=IR_VERSION,
                             opset_imports=[helper.make_opsetid("", OPSET),
                                            helper.make_opsetid("local", 1)])


def identity_model(name_in: str, name_out: str, element: int, width: int) -> onnx.ModelProto:
    """``name_out = Identity(name_in)`` of ``element`` type, shape [batch, width]."""
    graph = helper.make_graph(
        [helper.make_node("Identity", [name_in], [name_out])], "identity",
        [helper.make_tensor_value_info(name_in, element, ["batch", width])],
        [helper.make_tensor_value_info(name_out, element, ["batch", width])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                             ir_version=IR_VERSION)


def heavy_model(width: int = 512, layers: int = 6) -> onnx.ModelProto:
    """``y = sum(x @ W @ W ...)``: light for one row, seconds for thousands of rows."""
    weight = numpy_helper.from_array(
        (np.eye(width) + 0.001).astype(np.float32) / 1.5, "w")
    nodes, previous = [], "x"
    for index in range(layers):
        nodes.append(helper.make_node("MatMul", [previous, "w"], [f"h{index}"]))
        previous = f"h{index}"
    nodes.append(helper.make_node("ReduceSum", [previous], ["y"], keepdims=0))
    graph = helper.make_graph(
        nodes, "heavy", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])], [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                             ir_version=IR_VERSION)


def request_repository(root: pathlib.Path) -> pathlib.Path:
    """``good`` (MLP), ``text`` (strings), ``int8`` and ``heavy`` (no batching)."""
    good_repository(root)
    write_model(root / "text" / "1", identity_model("text", "out", TensorProto.STRING, 2))
    write_model(root / "int8" / "1", identity_model("x", "y", TensorProto.INT8, 3))
    # 24 layers: 8,000 rows take 0.3-0.6 s even on an idle AVX-512 core pair, so the calls
    # that the tests expect to outlast a 0.2 s deadline do (6 layers finished in 0.1 s)
    write_model(root / "heavy" / "1", heavy_model(layers=24))
    (root / "heavy" / "config.json").write_text('{"max_batch_size": 0}')
    return root


def sum_model() -> onnx.ModelProto:
    """``y = sum(x)`` of FP32 x [rows, cols]: a one-number answer to however large a request."""
    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["x"], ["y"], keepdims=0)], "sum",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", "cols"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                             ir_version=IR_VERSION)
