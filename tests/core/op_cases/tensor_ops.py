"""Cases for the tensor-op primitives: math, indexing and ordering families."""

import numpy as np

from tests.core.op_cases import Case, booleans, integers, positive


def distinct_rows(n_rows: int, shape: tuple, axis: int = 0):
    """An index along ``axis`` whose entries differ within each line (scatter without clashes)."""
    def make(rng):
        lines = [rng.permutation(n_rows)[:shape[axis]] for _ in range(int(np.prod(shape)) // shape[axis])]
        return np.moveaxis(np.array(lines).reshape(*[s for i, s in enumerate(shape) if i != axis], shape[axis]),
                           -1, axis).astype(np.int64)
    return make


def with_zeros(shape, count: int):
    def make(rng):
        x = rng.standard_normal(shape)
        x.reshape(-1)[:count] = 0.0
        return x
    return make


def not_near_integers(shape):
    return lambda rng: rng.integers(-3, 3, shape) + rng.uniform(0.1, 0.9, shape)


CASES = {
    "sin": [Case([(3, 4)])],
    "cos": [Case([(2, 3)])],
    "erf": [Case([(3, 4)])],
    "expm1": [Case([(3, 4)])],
    "log1p": [Case([positive((3, 4))])],
    "floor": [Case([not_near_integers((3, 4))])],
    "ceil": [Case([not_near_integers((3, 4))])],
    "round": [Case([not_near_integers((3, 4))])],
    "fmod": [Case([lambda rng: rng.uniform(-5, 5, (3, 4)) + 0.05, positive((4,))]),
             Case([integers((3, 4), -9, 9), lambda rng: rng.integers(1, 4, (3, 4))], grad=False, id="int")],
    "prod": [Case([(2, 3, 4)], {"axes": [1], "keepdims": False}),
             Case([with_zeros((2, 3), 1)], {"axes": [0, 1], "keepdims": True}, id="one_zero"),
             Case([with_zeros((4,), 2)], {"axes": [0], "keepdims": False}, id="two_zeros")],
    "bitwise_and": [Case([integers((3, 4), 0, 16), integers((4,), 0, 16)]),
                    Case([booleans((3, 4)), booleans((3, 4))], id="bool")],
    "bitwise_or": [Case([integers((3, 4), 0, 16), integers((3, 4), 0, 16)]),
                   Case([booleans((3,)), booleans((2, 3))], id="bool")],
    "bitwise_xor": [Case([integers((3, 4), 0, 16), integers((3, 4), 0, 16)]),
                    Case([booleans((3, 4)), booleans((3, 4))], id="bool")],
    "bitwise_not": [Case([integers((3, 4), -8, 8)]), Case([booleans((3, 4))], id="bool")],
    "gather": [Case([(4, 3), integers((2, 3), 0, 4)], {"axis": 0}),
               Case([(2, 5, 3), integers((2, 4, 2), 0, 5)], {"axis": 1}, id="smaller_index")],
    "scatter": [Case([(4, 3), distinct_rows(4, (2, 3)), (2, 3)], {"axis": 0}),
                Case([(3, 5), distinct_rows(5, (3, 2), axis=1), (3, 2)], {"axis": 1}, id="axis1")],
    "scatter_add": [Case([(4, 3), integers((5, 3), 0, 4), (5, 3)], {"axis": 0}),
                    Case([(2, 3), integers((2, 6), -3, 3), (2, 6)], {"axis": 1}, id="negative")],
    "take": [Case([(5, 3), integers((4,), -5, 5)], {"axis": 0}),
             Case([(2, 5, 3), integers((2, 3), 0, 5)], {"axis": 1}, id="2d_index")],
    "topk": [Case([(3, 6)], {"k": 2, "axis": 1, "largest": True}),
             Case([(5, 3)], {"k": 5, "axis": 0, "largest": False}, id="sort_ascending")],
    "cumsum": [Case([(3, 4)], {"axis": 1, "reverse": False}),
               Case([(3, 4)], {"axis": 0, "reverse": True}, id="reverse"),
               Case([integers((5,), -3, 3)], {"axis": 0, "reverse": False}, grad=False, id="int")],
}
