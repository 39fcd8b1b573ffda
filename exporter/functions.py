"""Model-local ONNX functions in the ``flowserve`` domain: how fused groups are emitted
for the portable target.

A function body is built with an ordinary ``Builder`` over formal names; its constants
become ``Constant`` nodes (functions hold no initializers). One function is made per
distinct body (kind plus static attributes) and reused by every call site.

>>> def body(fb, x):                                       # doctest: +SKIP
...     return [fb.op1("Mul", [x, fb.op1("Sigmoid", [x])])]
>>> call_function(b, "SiLU", body, ["h"], ["y"])           # doctest: +SKIP
"""

from __future__ import annotations

from typing import Callable

from onnx import helper

from flowserve.onnx_backend import versions
from flowserve.onnx_backend.builder import Builder


def call_function(b: Builder, name: str, body: Callable, inputs: list, outputs: list) -> list:
    """Emit a call of function ``flowserve.<name>`` (built by ``body(fb, *formals)`` on
    first use) on ``inputs``, writing ``outputs``. ``body`` returns its result names."""
    existing = {(f.domain, f.name) for f in b.functions}
    if (versions.FLOWSERVE_DOMAIN, name) not in existing:
        b.functions.append(_make_function(b.opset, name, body, len(inputs)))
    b.op(name, inputs, outputs, domain=versions.FLOWSERVE_DOMAIN)
    return outputs


def _make_function(opset: int, name: str, body: Callable, n_inputs: int):
    fb = Builder(opset)
    formals = [f"X{i}" for i in range(n_inputs)]
    results = body(fb, *formals)
    outs = [f"Y{i}" for i in range(len(results))]
    nodes = [helper.make_node("Constant", [], [const], value=tensor)
             for const, tensor in fb.initializers.items()]
    nodes += fb.nodes
    nodes += [helper.make_node("Identity", [r], [o]) for r, o in zip(results, outs)]
    opsets = [helper.make_opsetid(d, v) for d, v in fb.domains.items()]
    return helper.make_function(versions.FLOWSERVE_DOMAIN, name, formals, outs, nodes, opsets)
