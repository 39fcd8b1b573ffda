"""Recurrent layers as primitives: one layer, one direction, time-major, PyTorch's gates.

``lstm_layer(x, h0, c0, w_ih, w_hh, b_ih, b_hh, reverse)`` -> ``(y, h_n, c_n)``,
``gru_layer(x, h0, w_ih, w_hh, b_ih, b_hh, reverse)`` -> ``(y, h_n)`` and
``rnn_layer(x, h0, w_ih, w_hh, b_ih, b_hh, nonlinearity, reverse)`` -> ``(y, h_n)``, with
``x`` of shape ``(T, B, I)``, ``y`` ``(T, B, H)``, PyTorch's weight layouts and gate orders
(LSTM ``i, f, g, o``; GRU ``r, z, n`` with ``r`` applied to ``W_hn h + b_hn``). Each is one
ONNX ``LSTM``/``GRU``/``RNN`` node when exported (the lowering reorders the gates). The
kernel loops over time in numpy; the gradient recomputes the layer as a composite of
matmuls and activations (``*_composite``, also the eager reference) and differentiates that,
so a graph's backward is written with ordinary ops.
"""

from __future__ import annotations

from flowserve.autograd import engine, grad_mode  # modules: autograd imports the ops first
from flowserve.ops import functional
from flowserve.ops.indexing_functions import chunk, unbind
from flowserve.ops.registry import Meta, fail_shape, primitive

GATES = {"lstm_layer": 4, "gru_layer": 3, "rnn_layer": 1}


def _meta(op: str, states: int):
    def meta(x: Meta, *rest: Meta, **attrs):
        h0, w_ih, w_hh = rest[0], rest[states], rest[states + 1]
        gates = GATES[op]
        if x.ndim != 3:
            fail_shape(op, "an input of shape (T, B, input_size)", tuple(x.shape))
        hidden = h0.shape[-1]
        if tuple(w_ih.shape) != (gates * hidden, x.shape[2]) or tuple(w_hh.shape) != (gates * hidden, hidden):
            fail_shape(op, f"weights ({gates * hidden}, {x.shape[2]}) and ({gates * hidden}, {hidden})",
                       f"{tuple(w_ih.shape)} and {tuple(w_hh.shape)}")
        if tuple(h0.shape) != (x.shape[1], hidden):
            fail_shape(op, f"an initial state of shape ({x.shape[1]}, {hidden})", tuple(h0.shape))
        state = Meta((x.shape[1], hidden), x.dtype)
        return (Meta((x.shape[0], x.shape[1], hidden), x.dtype),) + (state,) * states

    return meta


def _sigmoid(xp, v):
    return 1.0 / (1.0 + xp.exp(-v))


def _steps(length: int, reverse: bool):
    return range(length - 1, -1, -1) if reverse else range(length)


def _lstm_vjp(ctx, *grads):
    return _recompute_vjp(lstm_composite, ctx, grads)


@primitive("lstm_layer", shape=_meta("lstm_layer", 2), vjp=_lstm_vjp, multiple_results=True)
def lstm_layer(xp, x, h0, c0, w_ih, w_hh, b_ih, b_hh, reverse: bool = False):
    h, c, ys = h0, c0, [None] * x.shape[0]
    pre = x @ w_ih.T + b_ih
    for t in _steps(x.shape[0], reverse):
        i, f, g, o = xp.split(pre[t] + h @ w_hh.T + b_hh, 4, axis=-1)
        c = _sigmoid(xp, f) * c + _sigmoid(xp, i) * xp.tanh(g)
        h = _sigmoid(xp, o) * xp.tanh(c)
        ys[t] = h
    return xp.stack(ys).astype(x.dtype), h.astype(x.dtype), c.astype(x.dtype)


def _gru_vjp(ctx, *grads):
    return _recompute_vjp(gru_composite, ctx, grads)


@primitive("gru_layer", shape=_meta("gru_layer", 1), vjp=_gru_vjp, multiple_results=True)
def gru_layer(xp, x, h0, w_ih, w_hh, b_ih, b_hh, reverse: bool = False):
    h, ys = h0, [None] * x.shape[0]
    pre = x @ w_ih.T + b_ih
    for t in _steps(x.shape[0], reverse):
        xr, xz, xn = xp.split(pre[t], 3, axis=-1)
        hr, hz, hn = xp.split(h @ w_hh.T + b_hh, 3, axis=-1)
        r, z = _sigmoid(xp, xr + hr), _sigmoid(xp, xz + hz)
        n = xp.tanh(xn + r * hn)
        h = (1 - z) * n + z * h
        ys[t] = h
    return xp.stack(ys).astype(x.dtype), h.astype(x.dtype)


def _rnn_vjp(ctx, *grads):
    return _recompute_vjp(rnn_composite, ctx, grads)


@primitive("rnn_layer", shape=_meta("rnn_layer", 1), vjp=_rnn_vjp, multiple_results=True)
def rnn_layer(xp, x, h0, w_ih, w_hh, b_ih, b_hh, nonlinearity: str = "tanh", reverse: bool = False):
    act = xp.tanh if nonlinearity == "tanh" else (lambda v: xp.maximum(v, 0))
    h, ys = h0, [None] * x.shape[0]
    pre = x @ w_ih.T + b_ih
    for t in _steps(x.shape[0], reverse):
        h = act(pre[t] + h @ w_hh.T + b_hh)
        ys[t] = h
    return xp.stack(ys).astype(x.dtype), h.astype(x.dtype)


# -- the same layers as composites (the gradient, and a reference) ---------------------------


def _time_steps(x, reverse: bool):
    steps = list(unbind(x, 0))
    return list(reversed(steps)) if reverse else steps


def _finish(ys: list, reverse: bool):
    return functional.stack(list(reversed(ys)) if reverse else ys, 0)


def lstm_composite(x, h0, c0, w_ih, w_hh, b_ih, b_hh, reverse: bool = False):
    h, c, ys = h0, c0, []
    w_ih_t, w_hh_t = functional.transpose(w_ih, 0, 1), functional.transpose(w_hh, 0, 1)
    for x_t in _time_steps(x, reverse):
        i, f, g, o = chunk(functional.matmul(x_t, w_ih_t) + b_ih + functional.matmul(h, w_hh_t) + b_hh, 4, -1)
        c = functional.sigmoid(f) * c + functional.sigmoid(i) * functional.tanh(g)
        h = functional.sigmoid(o) * functional.tanh(c)
        ys.append(h)
    return _finish(ys, reverse), h, c


def gru_composite(x, h0, w_ih, w_hh, b_ih, b_hh, reverse: bool = False):
    h, ys = h0, []
    w_ih_t, w_hh_t = functional.transpose(w_ih, 0, 1), functional.transpose(w_hh, 0, 1)
    for x_t in _time_steps(x, reverse):
        xr, xz, xn = chunk(functional.matmul(x_t, w_ih_t) + b_ih, 3, -1)
        hr, hz, hn = chunk(functional.matmul(h, w_hh_t) + b_hh, 3, -1)
        r, z = functional.sigmoid(xr + hr), functional.sigmoid(xz + hz)
        n = functional.tanh(xn + r * hn)
        h = (1 - z) * n + z * h
        ys.append(h)
    return _finish(ys, reverse), h


def rnn_composite(x, h0, w_ih, w_hh, b_ih, b_hh, nonlinearity: str = "tanh", reverse: bool = False):
    act = functional.tanh if nonlinearity == "tanh" else functional.relu
    h, ys = h0, []
    w_ih_t, w_hh_t = functional.transpose(w_ih, 0, 1), functional.transpose(w_hh, 0, 1)
    for x_t in _time_steps(x, reverse):
        h = act(functional.matmul(x_t, w_ih_t) + b_ih + functional.matmul(h, w_hh_t) + b_hh)
        ys.append(h)
    return _finish(ys, reverse), h


def _recompute_vjp(composite, ctx, grads):
    """Input gradients of one recurrent node: rebuild it as ``composite`` on detached copies
    of its inputs and differentiate the sum of the outputs times their cotangents."""
    inputs = [t.detach() for t in ctx.inputs]
    wanted = [i for i in range(len(inputs)) if ctx.needs(i)]
    for i in wanted:
        inputs[i].requires_grad = True
    with grad_mode.enable_grad():
        outs = composite(*inputs, **ctx.attrs)
        total = None
        for out, g in zip(outs, grads):
            if g is not None:
                term = functional.sum(out * g)
                total = term if total is None else total + term
    found = engine.grad(total, [inputs[i] for i in wanted])
    result = [None] * len(inputs)
    for i, g in zip(wanted, found):
        result[i] = g
    return tuple(result)
