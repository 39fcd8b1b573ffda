"""A small ONNX graph builder: the one place that makes protobuf.

``b.op("Add", [x, y])`` appends a node and returns its output names; op types are
checked against ``onnx.defs`` when the node is made; constants become named,
de-duplicated initializers.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from flowserve.errors import ExportError
from flowserve.onnx_backend import versions

ONNX_DTYPES = {
    "bool": TensorProto.BOOL, "uint8": TensorProto.UINT8, "int8": TensorProto.INT8,
    "int16": TensorProto.INT16, "int32": TensorProto.INT32, "int64": TensorProto.INT64,
    "float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16,
    "float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE,
}
FROM_ONNX = {v: k for k, v in ONNX_DTYPES.items()}


def onnx_dtype(name: str) -> int:
    try:
        return ONNX_DTYPES[name]
    except KeyError:
        raise ExportError(f"dtype {name!r} has no ONNX equivalent") from None


class Builder:
    def __init__(self, opset: int = versions.DEFAULT_OPSET):
        self.opset = opset
        self.nodes: list = []
        self.inputs: list = []
        self.outputs: list = []
        self.initializers: dict = {}
        self.functions: list = []
        self.domains: dict = {"": opset}
        self._const_cache: dict = {}
        self._counter = 0

    def fresh(self, hint: str) -> str:
        self._counter += 1
        return f"{hint}__{self._counter}"

    def op(self, op_type: str, inputs: list, outputs=None, *, domain: str = "", n_out: int = 1,
           name: str | None = None, **attrs) -> list[str]:
        if domain == "" and not onnx.defs.has(op_type):
            raise ExportError(f"ONNX has no operator {op_type!r}")
        if outputs is None:
            outputs = [self.fresh(op_type) for _ in range(n_out)]
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(helper.make_node(op_type, list(inputs), list(outputs), name=name or outputs[0],
                                           domain=domain or None, **attrs))
        if domain and domain not in self.domains:
            self.domains[domain] = 1
        return list(outputs)

    def op1(self, op_type: str, inputs: list, output: str | None = None, **attrs) -> str:
        return self.op(op_type, inputs, [output] if output else None, **attrs)[0]

    def initializer(self, name: str, array: np.ndarray) -> str:
        self.initializers[name] = numpy_helper.from_array(np.asarray(array), name)
        return name

    def drop_initializers(self, names) -> None:
        """Remove initializers no node reads any more (and forget them as constants)."""
        for name in names:
            del self.initializers[name]
        self._const_cache = {k: v for k, v in self._const_cache.items() if v in self.initializers}

    def const(self, value, dtype=np.int64) -> str:
        """A constant tensor (de-duplicated by value): ``b.const([0, -1])``."""
        array = np.asarray(value, dtype=dtype)
        key = (array.dtype.str, array.shape, array.tobytes())
        name = self._const_cache.get(key)
        if name is None:
            name = self.initializer(self.fresh("const"), array)
            self._const_cache[key] = name
        return name

    def input(self, name: str, dtype: str, shape) -> None:
        self.inputs.append(helper.make_tensor_value_info(name, onnx_dtype(dtype), _dims(shape)))

    def output(self, name: str, dtype: str, shape) -> None:
        self.outputs.append(helper.make_tensor_value_info(name, onnx_dtype(dtype), _dims(shape)))

    def model(self, graph_name: str, doc: str = "") -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, graph_name, self.inputs, self.outputs,
                                  list(self.initializers.values()), doc_string=doc)
        opsets = [helper.make_opsetid(d, v) for d, v in self.domains.items()]
        model = helper.make_model(graph, opset_imports=opsets, functions=self.functions,
                                  producer_name="flowserve", ir_version=versions.ir_version(self.opset))
        return model


def _dims(shape):
    return [d if isinstance(d, str) else ("batch" if d == -1 and i == 0 else (f"dim_{i}" if d == -1 else int(d)))
            for i, d in enumerate(shape)]
