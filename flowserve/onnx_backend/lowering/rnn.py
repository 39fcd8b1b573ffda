"""ONNX lowerings of the recurrent layers: one ``LSTM``/``GRU``/``RNN`` node each.

PyTorch and ONNX order the gates differently (LSTM ``i f g o`` vs ``i o f c``; GRU ``r z n``
vs ``z r h``), so the weights and biases are split by gate and concatenated in ONNX's order
(in the graph: weights of a training graph are inputs); GRU uses ``linear_before_reset=1``,
which is PyTorch's formula. In float64 a layer is unrolled instead (``float64.py``).
"""

from __future__ import annotations

from flowserve.onnx_backend.lowering.float64 import emit_recurrent_f64, is_double
from flowserve.onnx_backend.lowering.registry import lowering
from flowserve.ops import rnn as prims

ONNX_ORDER = {"lstm_layer": (0, 3, 1, 2), "gru_layer": (1, 0, 2), "rnn_layer": (0,)}


def _reordered(b, name: str, order: tuple) -> str:
    if len(order) == 1:
        return name
    parts = b.op("Split", [name], n_out=len(order), axis=0, num_outputs=len(order))
    return b.op1("Concat", [parts[i] for i in order], axis=0)


def _add_direction(b, name: str) -> str:
    return b.op1("Unsqueeze", [name, b.const([0])])


def _recurrent(b, node, ctx, op_type: str, states: int, **attrs):
    if is_double(ctx, node.inputs[0]):  # ONNX Runtime's LSTM/GRU/RNN have no double kernels
        emit_recurrent_f64(b, node, ctx)
        return
    order = ONNX_ORDER[node.op]
    x, h0 = node.inputs[0], node.inputs[1]
    w_ih, w_hh, b_ih, b_hh = node.inputs[1 + states:5 + states]
    w = _add_direction(b, _reordered(b, w_ih, order))
    r = _add_direction(b, _reordered(b, w_hh, order))
    bias = _add_direction(b, b.op1("Concat", [_reordered(b, b_ih, order), _reordered(b, b_hh, order)], axis=0))
    initial = [_add_direction(b, h0)] + ([_add_direction(b, node.inputs[2])] if states == 2 else [])
    hidden = ctx.meta(h0).shape[-1]
    outs = b.op(op_type, [x, w, r, bias, "", *initial], n_out=1 + states, hidden_size=int(hidden),
                direction="reverse" if node.attrs.get("reverse") else "forward", **attrs)
    b.op("Squeeze", [outs[0], b.const([1])], [node.outputs[0]])
    for out, name in zip(outs[1:], node.outputs[1:]):
        b.op("Squeeze", [out, b.const([0])], [name])


@lowering(prims.lstm_layer)
def lower_lstm(b, node, ctx):
    _recurrent(b, node, ctx, "LSTM", 2)


@lowering(prims.gru_layer)
def lower_gru(b, node, ctx):
    _recurrent(b, node, ctx, "GRU", 1, linear_before_reset=1)


@lowering(prims.rnn_layer)
def lower_rnn(b, node, ctx):
    _recurrent(b, node, ctx, "RNN", 1, activations=["Tanh" if node.attrs.get("nonlinearity", "tanh") == "tanh"
                                                    else "Relu"])
