"""GELU (exact and tanh) and SiLU: elementwise subgraphs recognised by what they compute.

Composite activations trace to chains of elementwise primitives that differ with how
they were written (``0.5 * x * (1 + erf(x / sqrt(2)))``, ``x * sigmoid(x)``, a ``gelu``
primitive, ...). So the pass grows, from each value ``x``, the cone of elementwise nodes
that read only ``x``, their own results and scalar constants, and evaluates each
candidate output on sample points with the registry kernels; a cone that computes GELU
or SiLU (to float32 precision) becomes one ``fused.Gelu`` / ``fused.SiLU`` node.
"""

from __future__ import annotations

import math

import numpy as np

from flowserve.exporter.passes.export_graph import ExportGraph, FusedGroup, fused_node
from flowserve.ir.graph import PassResult
from flowserve.ir.interpreter import run_node

ELEMENTWISE = {"add", "sub", "mul", "div", "pow", "neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid",
               "erf", "abs", "maximum", "minimum", "gelu", "silu", "square"}
MAX_CONE = 14
SAMPLES = np.linspace(-6.0, 6.0, 97)


def _gelu(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def _silu(x):
    return x / (1.0 + np.exp(-x))


REFERENCES = [("Gelu", {"approximate": "none"}, _gelu(SAMPLES)),
              ("Gelu", {"approximate": "tanh"}, _gelu_tanh(SAMPLES)),
              ("SiLU", {}, _silu(SAMPLES))]


def _scalar_const(g: ExportGraph, name: str) -> bool:
    return g.is_const(name) and int(np.prod(g.ir.values[name].shape)) == 1


def forward_cone(g: ExportGraph, x: str) -> list:
    """Elementwise nodes (in order) computed from ``x`` and scalar constants alone."""
    reached, cone = {x}, []
    start = next((i for i, n in enumerate(g.ir.nodes) if x in n.inputs), None)
    if start is None:
        return []
    for node in g.ir.nodes[start:]:
        if len(cone) >= MAX_CONE:
            break
        if node.op in ELEMENTWISE and all(i in reached or _scalar_const(g, i) for i in node.inputs) \
                and any(i in reached for i in node.inputs):
            cone.append(node)
            reached.update(node.outputs)
    return cone


def sub_cone(g: ExportGraph, cone: list, y: str):
    """The nodes of ``cone`` that ``y`` depends on, if nothing outside reads their inside."""
    by_out = {o: n for n in cone for o in n.outputs}
    needed, todo = [], [y]
    while todo:
        node = by_out.get(todo.pop())
        if node is not None and node not in needed:
            needed.append(node)
            todo.extend(node.inputs)
    inside = {o for n in needed for o in n.outputs}
    for name in inside - {y}:
        if name in g.output_names or any(u not in needed for u in g.users(name)):
            return None
    return [n for n in cone if n in needed]


def _identify(g: ExportGraph, x: str, nodes: list, y: str):
    dtype = g.ir.values[x].dtype
    if dtype not in ("float32", "float64", "float16"):
        return None
    env = {x: SAMPLES.astype(dtype)}
    env.update({i: g.consts[i] for n in nodes for i in n.inputs if g.is_const(i)})
    with np.errstate(all="ignore"):
        for node in nodes:
            run_node(g.ir, node, env)
    got = np.asarray(env[y], dtype=np.float64).ravel()
    if got.shape != SAMPLES.shape:
        return None
    tol = 1e-2 if dtype == "float16" else 2e-6
    for kind, attrs, ref in REFERENCES:
        if np.allclose(got, ref, rtol=tol, atol=tol):
            return kind, attrs
    return None


def _fuse_from(g: ExportGraph, x: str, kinds: tuple) -> bool:
    cone = forward_cone(g, x)
    for y in [o for n in reversed(cone) for o in n.outputs]:
        nodes = sub_cone(g, cone, y)
        if not nodes or tuple(g.ir.values[y].shape) != tuple(g.ir.values[x].shape):
            continue
        found = _identify(g, x, nodes, y)
        if found is None or found[0] not in kinds:
            continue
        kind, attrs = found
        detail = attrs.get("approximate", "")
        group = FusedGroup(kind, nodes[-1].scope, [n.op for n in nodes], y, detail)
        g.replace(nodes, fused_node(kind, [x], [y], attrs, nodes[-1]), group)
        return True
    return False


def _fuse(g: ExportGraph, kinds: tuple) -> PassResult:
    count = 0
    candidates = [v.name for v in g.ir.inputs] + [o for n in g.ir.nodes for o in n.outputs]
    for x in candidates:
        if not g.is_const(x) and x in g.ir.values and _fuse_from(g, x, kinds):
            count += 1
    return PassResult(g, count > 0)


def fuse_gelu(g: ExportGraph) -> PassResult:
    return _fuse(g, ("Gelu",))


def fuse_silu(g: ExportGraph) -> PassResult:
    return _fuse(g, ("SiLU",))
