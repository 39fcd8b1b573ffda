"""Checks of a saved graph's ``graph.json`` beyond JSON: field types, node attributes, and
the manifest's signature against the graph.

Every failure is one ``SavedGraphError`` naming the file and the field
(``graph.json: nodes[3].inputs[0]: expected a string, got list``), raised before anything
runs the graph.
"""

from __future__ import annotations

from pathlib import Path

from flowserve import dtypes
from flowserve.errors import SavedGraphError
from flowserve.ir.graph import GraphIR
from flowserve.ops.registry import REGISTRY, Meta
from flowserve.format.manifest import DTYPE_NAMES, MAX_DIM, MAX_RANK, SavedGraphManifest

_NODE_FIELDS = {"op": str, "inputs": list, "outputs": list, "attrs": dict, "scope": str, "loc": str}


def check_ir_json(doc, where: Path) -> None:
    """Types of the IR document's fields, node by node (``GraphIR.from_json`` trusts them)."""
    if not isinstance(doc, dict):
        raise SavedGraphError(f"{where}: inference: expected an object, got {type(doc).__name__}")
    nodes = doc.get("nodes")
    if not isinstance(nodes, list):
        raise SavedGraphError(f"{where}: nodes: expected a list, got {type(nodes).__name__}")
    for i, node in enumerate(nodes):
        _check_node_json(node, f"{where}: nodes[{i}]")
    for key in ("inputs", "outputs", "values"):
        values = doc.get(key)
        if not isinstance(values, list):
            raise SavedGraphError(f"{where}: {key}: expected a list, got {type(values).__name__}")
        for i, value in enumerate(values):
            _check_value_json(value, f"{where}: {key}[{i}]")


def _check_node_json(node, where: str) -> None:
    if not isinstance(node, dict):
        raise SavedGraphError(f"{where}: expected an object, got {type(node).__name__}")
    for field, kind in _NODE_FIELDS.items():
        if field in node and not isinstance(node[field], kind):
            raise SavedGraphError(f"{where}.{field}: expected {kind.__name__}, "
                                  f"got {type(node[field]).__name__}")
    for field in ("inputs", "outputs"):
        for j, name in enumerate(node.get(field, [])):
            if not isinstance(name, str):
                raise SavedGraphError(f"{where}.{field}[{j}]: expected a string, "
                                      f"got {type(name).__name__}")


def _check_value_json(value, where: str) -> None:
    if not isinstance(value, dict):
        raise SavedGraphError(f"{where}: expected an object, got {type(value).__name__}")
    shape = value.get("shape")
    if not isinstance(shape, list) or len(shape) > MAX_RANK or not all(
            isinstance(d, int) and not isinstance(d, bool) and -1 <= d <= MAX_DIM for d in shape):
        raise SavedGraphError(f"{where}.shape: expected at most {MAX_RANK} integer dims in "
                              f"[-1, {MAX_DIM}], got {str(shape)[:80]}")
    if value.get("dtype") not in DTYPE_NAMES:
        raise SavedGraphError(f"{where}.dtype: unknown dtype {str(value.get('dtype'))[:40]!r}")


def check_node_attributes(ir: GraphIR, where: Path) -> None:
    """Run every node's shape rule on the recorded metadata: a missing, misspelled or
    out-of-range attribute fails here with the op's own message, not deep in export."""
    for i, node in enumerate(ir.nodes):
        metas = [_meta(ir, name) for name in node.inputs]
        try:
            REGISTRY[node.op].shape(*metas, **node.attrs)
        except Exception as exc:  # the rule's own error, or what bad attrs make of it
            attrs = str(node.attrs)[:120]
            raise SavedGraphError(f"{where}: node {i} ({node.op}) rejects its attrs {attrs} "
                                  f"on inputs {[str(m) for m in metas]}: "
                                  f"{type(exc).__name__}: {str(exc)[:200]}") from None


def _meta(ir: GraphIR, name: str) -> Meta:
    value = ir.values.get(name) or ir.state.get(name)
    return Meta(tuple(value.shape), dtypes.from_name(value.dtype))


def check_signature_shapes(manifest: SavedGraphManifest, ir: GraphIR, where: Path) -> None:
    """Each manifest dim is -1 (dynamic) or the graph's traced dim."""
    for kind, specs, values in (("input", manifest.inputs, ir.inputs),
                                ("output", manifest.outputs, ir.outputs)):
        for spec, value in zip(specs, values):
            fits = len(spec.shape) == len(value.shape) and all(
                d in (-1, traced) for d, traced in zip(spec.shape, value.shape))
            if not fits:
                raise SavedGraphError(f"{where}: {kind} {spec.name!r} has shape {spec.shape}, "
                                      f"the graph's is {list(value.shape)}")
    shapes = {s.name: s.shape for s in list(manifest.inputs) + list(manifest.outputs)}
    for tensor, axes in manifest.dynamic_dims.items():  # named dims: dims of the signature, marked -1
        shape = shapes.get(tensor)
        bad = [a for a in axes if shape is None or a >= len(shape) or shape[a] != -1]
        if bad:
            raise SavedGraphError(f"{where}: dynamic_dims names dim {bad[0]} of {tensor!r}, which is not a "
                                  "dynamic (-1) dim of an input or output")
