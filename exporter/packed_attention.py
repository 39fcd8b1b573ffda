"""Self-attention with its Q, K and V projections packed, for the dynamic int8 quantizer.

The ``onnxruntime`` target exports a Transformer's self-attention as three weight
projections of one tensor (``MatMul`` + bias ``Add`` each, once ``plain_weight_matmuls``
has run) feeding ONNX Runtime's ``MultiHeadAttention``. ``quantize_dynamic`` can only
quantize the three ``MatMul``s there: three int8 GEMMs, and the attention kernel then
splits Q, K and V into heads itself. ONNX Runtime's ``com.microsoft.Attention`` takes the
input and one weight with the three projections side by side (``[Wq | Wk | Wv]``), and
``quantize_dynamic`` turns it into ``QAttention``: one int8 GEMM for the three projections,
written straight in the head layout the attention core reads. On the d_model 64
Transformer classifier (ONNX Runtime 1.31, 2 threads) that makes the int8-dynamic model
about 1.2x faster at batch 1 and 32 with the same top-1 agreement (docs/export.md).

Where the pattern does not match exactly (cross-attention, a mask, a projection whose
output is used elsewhere, non-constant weights, unequal sizes), the graph is left as it
was and the projections are quantized as ``MatMul``s.
"""

from __future__ import annotations

import collections

import numpy as np
import onnx
from onnx import helper, numpy_helper

from flowserve.onnx_backend.versions import MS_DOMAIN

ATTRIBUTES = frozenset({"num_heads", "scale", "mask_filter_value", "unidirectional"})  # both ops take them
Projection = collections.namedtuple("Projection", "source weight bias nodes")


class _Index:
    """What the rewrite looks up: each tensor's producer and number of uses, the weights."""

    def __init__(self, graph: onnx.GraphProto):
        self.producer = {out: node for node in graph.node for out in node.output}
        self.uses = collections.Counter(names_read(graph))
        self.uses.update(o.name for o in graph.output)
        self.weights = {t.name: t for t in graph.initializer}

    def only_use(self, name: str) -> bool:
        return self.uses[name] == 1

    def array(self, name: str) -> np.ndarray | None:
        return numpy_helper.to_array(self.weights[name]) if name in self.weights else None


def pack_self_attention(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every ``MultiHeadAttention`` over three projections of one tensor
    replaced by one ``Attention`` (see the module docstring); in place, and returned."""
    graph = model.graph
    index = _Index(graph)
    replaced, added = {}, []
    for node in graph.node:
        found = _self_attention(node, index)
        if found is not None:
            attention, weights, removed = _packed(node, found)
            replaced[id(node)] = attention
            replaced.update({id(n): None for n in removed})
            added += weights
    if not replaced:
        return model
    nodes = [replaced.get(id(n), n) for n in graph.node]
    del graph.node[:]
    graph.node.extend(n for n in nodes if n is not None)
    graph.initializer.extend(added)
    drop_unused_initializers(graph)
    return model


def _self_attention(node: onnx.NodeProto, index: _Index) -> list | None:
    """The three ``Projection``s feeding ``node`` if it is a ``MultiHeadAttention`` on Q, K
    and V only, each a constant-weight projection of the same tensor, of equal sizes."""
    attrs = {a.name for a in node.attribute}
    if (node.op_type != "MultiHeadAttention" or node.domain != MS_DOMAIN or len(node.input) < 3
            or any(node.input[3:]) or not all(node.input[:3]) or attrs - ATTRIBUTES):
        return None
    projections = [_projection(name, index) for name in node.input[:3]]
    if not all(projections) or len({p.source for p in projections}) != 1:
        return None
    if len({p.weight.shape for p in projections}) != 1 or projections[0].weight.ndim != 2:
        return None
    return projections


def _projection(name: str, index: _Index) -> Projection | None:
    """``name`` as ``source @ W (+ b)``: W a 2-D weight, b a 1-D one, every intermediate
    used only on the way to ``name`` (so that removing the nodes loses nothing)."""
    if not index.only_use(name):
        return None
    node, bias, nodes = index.producer.get(name), None, []
    if node is not None and node.op_type == "Add" and node.domain == "":
        for product, other in ((node.input[0], node.input[1]), (node.input[1], node.input[0])):
            candidate = index.array(other)
            if candidate is not None and candidate.ndim == 1 and index.only_use(product):
                bias, nodes, node = candidate, [node], index.producer.get(product)
                break
        else:
            return None
    if node is None or node.op_type != "MatMul" or node.domain != "":
        return None
    weight = index.array(node.input[1])
    if weight is None or weight.ndim != 2 or (bias is not None and bias.shape != weight.shape[1:]):
        return None
    if bias is None:
        bias = np.zeros(weight.shape[1], weight.dtype)
    return Projection(node.input[0], weight, bias, nodes + [node])


def _packed(node: onnx.NodeProto, projections: list) -> tuple:
    """(the ``Attention`` node, its packed weight and bias, the nodes it replaces)."""
    weight = numpy_helper.from_array(np.concatenate([p.weight for p in projections], axis=1),
                                     node.output[0] + "_qkv_weight")
    bias = numpy_helper.from_array(np.concatenate([p.bias for p in projections]), node.output[0] + "_qkv_bias")
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    attention = helper.make_node("Attention", [projections[0].source, weight.name, bias.name], list(node.output),
                                 name=(node.name or node.output[0]) + "_packed", domain=MS_DOMAIN, **attrs)
    return attention, [weight, bias], [n for p in projections for n in p.nodes]


def names_read(graph: onnx.GraphProto):
    """Every input name the graph's nodes read, those of their subgraphs (``If``, ``Loop``
    bodies, which may read the outer graph's tensors) included."""
    for node in graph.node:
        yield from node.input
        for attr in node.attribute:
            for sub in list(attr.graphs) + ([attr.g] if attr.HasField("g") else []):
                yield from names_read(sub)


def drop_unused_initializers(graph: onnx.GraphProto) -> None:
    """Remove the initializers nothing reads (weights replaced by rewritten ones), so the
    file does not carry them twice."""
    used = set(names_read(graph))
    kept = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
