"""Cases for the recurrent primitives: T=3 steps, batch 2, input 4, hidden 3."""

from tests.core.op_cases import Case

T, B, I, H = 3, 2, 4, 3


def _layer(gates: int, states: int, **attrs):
    shapes = [(T, B, I)] + [(B, H)] * states + [(gates * H, I), (gates * H, H), (gates * H,), (gates * H,)]
    return Case(shapes, attrs, id="-".join(f"{k}={v}" for k, v in attrs.items()) or "forward")


CASES = {
    "lstm_layer": [_layer(4, 2), _layer(4, 2, reverse=True)],
    "gru_layer": [_layer(3, 1), _layer(3, 1, reverse=True)],
    "rnn_layer": [_layer(1, 1, nonlinearity="tanh"), _layer(1, 1, nonlinearity="relu", reverse=True)],
}
