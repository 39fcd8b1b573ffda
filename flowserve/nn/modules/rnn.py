"""``nn.RNN``, ``nn.LSTM``, ``nn.GRU``: PyTorch's recurrent modules, parameter names included.

Multi-layer, bidirectional, ``batch_first``, inter-layer ``dropout``, ``bias=False``,
unbatched (2-d) inputs and initial states (``(h_0, c_0)`` for the LSTM). Each layer and
direction is one recurrent primitive (``flowserve.ops.rnn``): one ONNX ``LSTM``/``GRU``/
``RNN`` node when exported, trainable eagerly and in ``nn.Graph``.

>>> import flowserve as flow
>>> lstm = flow.nn.LSTM(10, 20, num_layers=2, batch_first=True)
>>> out, (h, c) = lstm(flow.randn(3, 5, 10))
>>> tuple(out.shape), tuple(h.shape)
((3, 5, 20), (2, 3, 20))
"""

from __future__ import annotations

import math

from flowserve.nn import functional as nn_functional
from flowserve.nn import init
from flowserve.nn.module import Module
from flowserve.nn.parameter import Parameter
from flowserve.ops import creation
from flowserve.ops import functional as ops_functional
from flowserve.ops import rnn as rnn_ops
from flowserve.ops.autocast_policy import lower_precision

_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


class RNNBase(Module):
    """The shared parameters and layer loop of RNN, LSTM and GRU."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 proj_size: int = 0, device=None, dtype=None):
        super().__init__()
        if not 0 <= dropout <= 1 or isinstance(dropout, bool):
            raise ValueError("dropout should be a number in range [0, 1] representing the probability of an "
                             f"element being zeroed, got {dropout}")
        if proj_size:
            raise ValueError(f"{type(self).__name__}: proj_size is not available in flowserve (got {proj_size}); "
                             "use a Linear layer on the outputs")
        if hidden_size <= 0 or num_layers <= 0:
            raise ValueError(f"hidden_size and num_layers must be positive, got {hidden_size} and {num_layers}")
        self.mode, self.input_size, self.hidden_size = mode, input_size, hidden_size
        self.num_layers, self.bias, self.batch_first = num_layers, bias, batch_first
        self.dropout, self.bidirectional, self.proj_size = float(dropout), bidirectional, proj_size
        gates = _GATES[mode] * hidden_size
        self._flat_weights_names = []
        for layer in range(num_layers):
            for suffix in ("", "_reverse")[: 2 if bidirectional else 1]:
                width = input_size if layer == 0 else hidden_size * (2 if bidirectional else 1)
                names = [f"weight_ih_l{layer}{suffix}", f"weight_hh_l{layer}{suffix}"]
                shapes = [(gates, width), (gates, hidden_size)]
                if bias:
                    names += [f"bias_ih_l{layer}{suffix}", f"bias_hh_l{layer}{suffix}"]
                    shapes += [(gates,), (gates,)]
                for name, shape in zip(names, shapes):
                    setattr(self, name, Parameter(creation.empty(*shape, device=device, dtype=dtype)))
                self._flat_weights_names += names
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.hidden_size)
        for name in self._flat_weights_names:
            init.uniform_(getattr(self, name), -bound, bound)

    @property
    def _directions(self) -> int:
        return 2 if self.bidirectional else 1

    def _layer_weights(self, layer: int, suffix: str) -> list:
        w_ih, w_hh = getattr(self, f"weight_ih_l{layer}{suffix}"), getattr(self, f"weight_hh_l{layer}{suffix}")
        if self.bias:
            return [w_ih, w_hh, getattr(self, f"bias_ih_l{layer}{suffix}"), getattr(self, f"bias_hh_l{layer}{suffix}")]
        zeros = creation.zeros(w_ih.shape[0], dtype=w_ih.dtype, device=w_ih.device)
        return [w_ih, w_hh, zeros, zeros]

    def _check_input(self, x, states: list) -> None:
        if x.ndim not in (2, 3):
            raise ValueError(f"{type(self).__name__}: Expected input to be 2D or 3D, got {x.ndim}D instead")
        if x.shape[-1] != self.input_size:
            raise ValueError(f"{type(self).__name__}: input.size(-1) must be equal to input_size. "
                             f"Expected {self.input_size}, got {x.shape[-1]}")
        expected = (self.num_layers * self._directions, x.shape[1], self.hidden_size)
        for s in states:
            if s is not None and tuple(s.shape) != expected:
                raise RuntimeError(f"{type(self).__name__}: Expected hidden size {expected}, got {tuple(s.shape)}")

    def _run(self, x, states: list):
        """``x`` (T, B, I) and per state ``(layers * directions, B, H)``: the outputs."""
        finals: list = [[] for _ in states]
        for layer in range(self.num_layers):
            outputs = []
            for d, suffix in enumerate(("", "_reverse")[: self._directions]):
                index = layer * self._directions + d
                init_states = [s[index] for s in states]
                result = self._cell(x, init_states, self._layer_weights(layer, suffix), reverse=d == 1)
                outputs.append(result[0])
                for store, state in zip(finals, result[1:]):
                    store.append(state)
            x = outputs[0] if len(outputs) == 1 else ops_functional.cat(outputs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = nn_functional.dropout(x, self.dropout, True)
        return x, [ops_functional.stack(f, 0) for f in finals]

    def _forward(self, x, hx: list):
        unbatched = x.ndim == 2
        if unbatched:
            x = x.unsqueeze(1)
            hx = [None if h is None else h.unsqueeze(1) for h in hx]
        elif self.batch_first:
            x = x.transpose(0, 1)
        self._check_input(x, hx)
        batch = x.shape[1]
        shape = (self.num_layers * self._directions, batch, self.hidden_size)
        hx = [creation.zeros(*shape, dtype=x.dtype, device=x.device) if h is None else h for h in hx]
        out, finals = self._run(x, hx)
        if unbatched:
            return out.squeeze(1), [f.squeeze(1) for f in finals]
        return (out.transpose(0, 1) if self.batch_first else out), finals

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        for key, default in (("bias", True), ("batch_first", False), ("dropout", 0.0), ("bidirectional", False)):
            if getattr(self, key) != default:
                s += f", {key}={getattr(self, key)}"
        return s


class RNN(RNNBase):
    """Elman RNN: ``h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)`` (or ReLU)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, nonlinearity: str = "tanh",
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device=None, dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'.")
        self.nonlinearity = nonlinearity
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size, hidden_size,
                         num_layers, bias, batch_first, dropout, bidirectional, device=device, dtype=dtype)

    def _cell(self, x, states, weights, reverse):
        return rnn_ops.rnn_layer(x, states[0], *weights, nonlinearity=self.nonlinearity, reverse=reverse)

    def forward(self, input, hx=None):  # noqa: A002 - PyTorch's argument name
        out, (h,) = self._forward(input, [hx])
        return out, h


class LSTM(RNNBase):
    """Long short-term memory; returns ``output, (h_n, c_n)``."""

    def __init__(self, *args, **kwargs):
        super().__init__("LSTM", *args, **kwargs)

    @lower_precision  # under flow.autocast: in float16/bfloat16, as PyTorch's CPU LSTM
    def _cell(self, x, states, weights, reverse):
        return rnn_ops.lstm_layer(x, states[0], states[1], *weights, reverse=reverse)

    def forward(self, input, hx=None):  # noqa: A002
        h0, c0 = (None, None) if hx is None else hx
        out, (h, c) = self._forward(input, [h0, c0])
        return out, (h, c)


class GRU(RNNBase):
    """Gated recurrent unit (PyTorch's formula: the reset gate scales ``W_hn h + b_hn``)."""

    def __init__(self, *args, **kwargs):
        super().__init__("GRU", *args, **kwargs)

    def _cell(self, x, states, weights, reverse):
        return rnn_ops.gru_layer(x, states[0], *weights, reverse=reverse)

    def forward(self, input, hx=None):  # noqa: A002
        out, (h,) = self._forward(input, [hx])
        return out, h


class RNNCellBase(Module):
    """One time step of an RNN/LSTM/GRU (``weight_ih``, ``weight_hh``, ``bias_ih``,
    ``bias_hh``, as PyTorch), run as the recurrent primitive on a length-1 sequence."""

    _gates = 1

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        kw = dict(device=device, dtype=dtype)
        gates = self._gates * hidden_size
        self.weight_ih = Parameter(creation.empty(gates, input_size, **kw))
        self.weight_hh = Parameter(creation.empty(gates, hidden_size, **kw))
        self.bias_ih = Parameter(creation.empty(gates, **kw)) if bias else None
        self.bias_hh = Parameter(creation.empty(gates, **kw)) if bias else None
        bound = 1.0 / math.sqrt(hidden_size)
        for p in self.parameters():
            init.uniform_(p, -bound, bound)

    def _step(self, x, states: list):
        """``states`` (``None`` for zeros) after one step on ``x`` ((B, I) or (I,))."""
        if x.ndim not in (1, 2) or x.shape[-1] != self.input_size:
            raise ValueError(f"{type(self).__name__}: expected input of size (N, {self.input_size}) or "
                             f"({self.input_size},), got {tuple(x.shape)}")
        unbatched = x.ndim == 1
        x = x.unsqueeze(0) if unbatched else x
        states = [creation.zeros(x.shape[0], self.hidden_size, dtype=x.dtype, device=x.device) if s is None
                  else (s.unsqueeze(0) if unbatched else s) for s in states]
        zeros = creation.zeros(self.weight_ih.shape[0], dtype=x.dtype, device=x.device)
        biases = [self.bias_ih, self.bias_hh] if self.bias else [zeros, zeros]
        out = self._cell(x.unsqueeze(0), states, [self.weight_ih, self.weight_hh, *biases])[1:]
        return [s.squeeze(0) for s in out] if unbatched else list(out)

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}" + ("" if self.bias else ", bias=False")


class RNNCell(RNNCellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 device=None, dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity: {nonlinearity}")
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, bias, device, dtype)

    def _cell(self, x, states, weights):
        return rnn_ops.rnn_layer(x, states[0], *weights, nonlinearity=self.nonlinearity)

    def forward(self, input, hx=None):  # noqa: A002
        return self._step(input, [hx])[0]


class LSTMCell(RNNCellBase):
    _gates = 4

    def _cell(self, x, states, weights):
        return rnn_ops.lstm_layer(x, states[0], states[1], *weights)

    def forward(self, input, hx=None):  # noqa: A002
        h, c = self._step(input, [None, None] if hx is None else list(hx))
        return h, c


class GRUCell(RNNCellBase):
    _gates = 3

    def _cell(self, x, states, weights):
        return rnn_ops.gru_layer(x, states[0], *weights)

    def forward(self, input, hx=None):  # noqa: A002
        return self._step(input, [hx])[0]
