"""LayerNorm: the ``layer_norm_stats`` primitive, and hand-written layer norms recognised by
what they compute.

``nn.LayerNorm`` and ``F.layer_norm`` trace to one ``layer_norm_stats`` node; over the last
dim, with its statistics unused, it becomes one ``fused.LayerNorm`` node (a weight of ones
and a bias of zeros, what a layer without affine parameters holds, count as none). A layer
norm written by hand traces to about a dozen primitives (sum, scale, subtract, square,
sum, add eps, sqrt, divide, weight, bias). From each value ``x`` the pass grows the cone of
elementwise nodes and last-axis sums that read only ``x``, scalars and last-axis vectors,
then checks a candidate output numerically against ``(x - mean) / sqrt(var + eps) * w + b``
for the cone's own constants; a match becomes one ``fused.LayerNorm`` node. Either way a
residual add that only the layer norm reads joins it.
"""

from __future__ import annotations

import itertools

import numpy as np

from flowserve.exporter.passes.export_graph import ExportGraph, FusedGroup, fused_node
from flowserve.exporter.passes.activations import sub_cone
from flowserve.ir.graph import PassResult
from flowserve.ir.interpreter import run_node

OPS = {"add", "sub", "mul", "div", "pow", "sqrt", "rsqrt", "neg", "sum"}
MAX_CONE = 16


def _allowed_const(g: ExportGraph, name: str, width: int) -> bool:
    if not g.is_const(name):
        return False
    shape = g.ir.values[name].shape
    return int(np.prod(shape)) == 1 or tuple(shape) == (width,)


def _cone(g: ExportGraph, x: str) -> list:
    shape = g.ir.values[x].shape
    if len(shape) < 2 or g.ir.values[x].dtype not in ("float32", "float64", "float16"):
        return []
    reached, cone, width, last = {x}, [], shape[-1], len(shape) - 1
    for node in g.ir.nodes:
        if len(cone) >= MAX_CONE:
            break
        if node.op not in OPS or not any(i in reached for i in node.inputs):
            continue
        if node.op == "sum" and (node.attrs.get("axes") not in ([last], [-1]) or not node.attrs.get("keepdims")):
            continue
        if all(i in reached or _allowed_const(g, i, width) for i in node.inputs):
            cone.append(node)
            reached.update(node.outputs)
    return cone


def _evaluate(g: ExportGraph, x: str, nodes: list, y: str, sample: np.ndarray) -> np.ndarray:
    env = {x: sample}
    env.update({i: g.consts[i] for n in nodes for i in n.inputs if g.is_const(i)})
    with np.errstate(all="ignore"):
        for node in nodes:
            run_node(g.ir, node, env)
    return np.asarray(env[y], dtype=np.float64)


def _reference(x: np.ndarray, eps: float, w, b) -> np.ndarray:
    x = x.astype(np.float64)
    centered = x - x.mean(-1, keepdims=True)
    y = centered / np.sqrt((centered**2).mean(-1, keepdims=True) + eps)
    return y * (1.0 if w is None else w) + (0.0 if b is None else b)


def _identify(g: ExportGraph, x: str, nodes: list, y: str):
    """(eps, weight name, bias name) when the cone computes a layer norm of ``x``."""
    v = g.ir.values[x]
    rng = np.random.default_rng(0)
    samples = [rng.standard_normal(v.shape), 2.0 + 0.03 * rng.standard_normal(v.shape)]
    samples = [s.astype(v.dtype) for s in samples]
    got = [_evaluate(g, x, nodes, y, s) for s in samples]
    consts = {i for n in nodes for i in n.inputs if g.is_const(i)}
    scalars = sorted({float(np.asarray(g.consts[c]).ravel()[0]) for n in nodes if n.op == "add"
                      for c in n.inputs if c in consts and g.consts[c].size == 1} | {0.0})
    vectors = sorted(c for c in consts if g.consts[c].size > 1) + [None]  # prefer the model's own
    tol = 1e-2 if v.dtype == "float16" else 1e-4
    for eps, w, b in itertools.product(scalars, vectors, vectors):
        if w is not None and w == b:
            continue
        wv = None if w is None else g.consts[w].astype(np.float64)
        bv = None if b is None else g.consts[b].astype(np.float64)
        if all(np.allclose(o, _reference(s, eps, wv, bv), rtol=tol, atol=tol * max(1.0, np.abs(o).max()))
               for o, s in zip(got, samples)):
            return eps, w, b
    return None


def _is_filled(g: ExportGraph, name: str, value: float) -> bool:
    """``name`` holds only ``value``: a constant, or a constant expanded (which folding keeps)."""
    node = g.producer(name)
    if node is not None and node.op == "expand":
        name = node.inputs[0]
    return g.is_const(name) and bool(np.all(np.asarray(g.consts[name]) == value))


def _fuse_primitive(g: ExportGraph, node) -> bool:
    """``layer_norm_stats`` over the last dim whose mean and rstd nothing reads."""
    x, w, b = node.inputs
    y, mean, rstd = node.outputs
    if node.attrs["dims"] != 1 or any(g.users(s) or s in g.output_names for s in (mean, rstd)):
        return False
    w = None if _is_filled(g, w, 1.0) else w
    b = None if _is_filled(g, b, 0.0) else b
    _replace(g, x, [node], y, float(node.attrs["eps"]), w, b)
    return True


def _replace(g: ExportGraph, x: str, nodes: list, y: str, eps: float, w, b) -> None:
    skip = _residual_add(g, x, nodes)
    inputs = (list(skip.inputs) if skip else [x]) + [name for name in (w, b) if name is not None]
    nodes = ([skip] if skip else []) + nodes
    attrs = {"epsilon": eps, "has_weight": w is not None, "has_bias": b is not None, "skip": bool(skip)}
    detail = f"eps={eps:g}" + (", residual add" if skip else "")
    group = FusedGroup("LayerNorm", nodes[-1].scope, [n.op for n in nodes], y, detail)
    g.replace(nodes, fused_node("LayerNorm", inputs, [y], attrs, nodes[-1]), group)


def _fuse_from(g: ExportGraph, x: str) -> bool:
    cone = _cone(g, x)
    if not any(n.op == "sum" for n in cone):
        return False
    for y in [o for n in reversed(cone) for o in n.outputs]:
        nodes = sub_cone(g, cone, y)
        if not nodes or sum(n.op == "sum" for n in nodes) != 2 or g.ir.values[y].shape != g.ir.values[x].shape:
            continue
        found = _identify(g, x, nodes, y)
        if found is None:
            continue
        _replace(g, x, nodes, y, *found)
        return True
    return False


def _residual_add(g: ExportGraph, x: str, nodes: list):
    """The ``add(a, b)`` of two same-shape 3-D activations producing ``x``, when only the
    layer norm reads ``x`` (ONNX Runtime's SkipLayerNormalization then does both)."""
    add = g.producer(x)
    if add is None or add.op != "add" or x in g.output_names:
        return None
    shapes = [tuple(g.ir.values[i].shape) for i in add.inputs]
    if len(shapes[0]) != 3 or shapes[0] != shapes[1] or any(g.is_const(i) for i in add.inputs):
        return None
    return add if all(u in nodes for u in g.users(x)) else None


def fuse_layernorm(g: ExportGraph) -> PassResult:
    count = 0
    for node in [n for n in g.ir.nodes if n.op == "layer_norm_stats"]:
        count += _fuse_primitive(g, node)
    candidates = [v.name for v in g.ir.inputs] + [o for n in g.ir.nodes for o in n.outputs]
    for x in candidates:
        if x in g.ir.values and not g.is_const(x) and _fuse_from(g, x):
            count += 1
    return PassResult(g, count > 0)
