"""The symbolic batch size of a traced graph.

While ``nn.Graph.build`` is traced, dim 0 of the graph's inputs (when they share it) is a
``BatchDim``: an ``int`` equal to the traced batch size, so every shape rule and every
user computation works as before, that also marks "this is the batch". Shape rules that
pass dims through keep the mark (``x.shape[0]``, ``B, T, C = x.size()``), and an op whose
attribute holds one (``expand(x.shape[0], -1, -1)``, ``view(B, T, C)``,
``zeros(x.shape[0], 4)``, ``repeat(B, 1, 1)``) records where, so its ONNX lowering reads
the batch size at run time instead of baking the traced one in.

Integer arithmetic with plain ints keeps the mark as an expression of the batch
(``B * T``, ``2 * B``, ``B // 2``, ``B + 1``, ``B - 1``, ``-B``): a ``BatchDim`` whose
``steps`` say how to compute it from the batch size (``(("mul", T),)``), so ``view(B * T, C)``
or ``zeros(B + 1, 4)`` follow the batch too; the lowering computes the steps from the
run-time batch (``Mul``/``Div``/``Add`` on the batch size). Anything else (``B * B``,
``B % 2``, ``B / 2``, a negative value floor-divided) gives a plain int, so the batch size
stays baked there, and ``flow.save`` reports it.

>>> b = BatchDim(4)
>>> b == 4, (b * 1) is b, (b * 3 + 1).steps, (b * 3 + 1).at(5)
(True, True, (('mul', 3), ('add', 1)), 16)
"""

from __future__ import annotations


STEP_OPS = ("mul", "div", "add")  # x * k, x // k (k > 0, x >= 0), x + k


def apply_steps(steps, batch: int) -> int:
    """The dim that ``steps`` compute from batch size ``batch``."""
    value = int(batch)
    for op, k in steps:
        value = value * k if op == "mul" else value // k if op == "div" else value + k
    return value


class BatchDim(int):
    """The batch size inside a traced build, or an integer expression of it (``steps``):
    an ``int`` that knows how it follows the batch."""

    def __new__(cls, value: int, steps=()) -> "BatchDim":
        dim = super().__new__(cls, int(value))
        dim.steps = tuple((str(op), int(k)) for op, k in steps)
        return dim

    def at(self, batch: int) -> int:
        """This dim at batch size ``batch``."""
        return apply_steps(self.steps, batch)

    def _then(self, op: str, k: int, value: int):
        return BatchDim(value, self.steps + ((op, k),))

    def __mul__(self, other):
        if type(other) is not int:  # another BatchDim (B * B), a float, ...: a plain result
            return int(self) * _plain(other)
        return self if other == 1 else self._then("mul", other, int(self) * other)

    __rmul__ = __mul__

    def __floordiv__(self, other):
        if type(other) is not int or other <= 0 or int(self) < 0:
            return int(self) // _plain(other)
        return self if other == 1 else self._then("div", other, int(self) // other)

    def __add__(self, other):
        if type(other) is not int:
            return int(self) + _plain(other)
        return self if other == 0 else self._then("add", other, int(self) + other)

    __radd__ = __add__

    def __sub__(self, other):
        return self + (-other) if type(other) is int else int(self) - _plain(other)

    def __rsub__(self, other):
        return (-self) + other if type(other) is int else _plain(other) - int(self)

    def __neg__(self):
        return self._then("mul", -1, -int(self))

    def __repr__(self) -> str:
        return int.__repr__(self)

    def __reduce__(self):
        return (BatchDim, (int(self), self.steps))


def _plain(v):
    """``v`` without the mark: two expressions of the batch combined (``B * B``, ``B - B // 2``)
    are not one of the forms the lowering computes, so they give a plain int."""
    return int(v) if isinstance(v, int) else v


def as_dim(d):
    """A size argument as a dim: ``BatchDim`` kept, anything else through ``int()``."""
    return d if isinstance(d, BatchDim) else int(d)


EXPR_SUFFIX = "@steps"  # node.batch[attr + EXPR_SUFFIX]: [[position, steps], ...] for expressions of the batch


def batch_positions(attrs: dict) -> dict:
    """Attribute name -> positions holding a ``BatchDim``, for list/tuple attributes; and
    for positions holding an expression of the batch, ``name@steps`` -> ``[[position,
    [[op, k], ...]], ...]`` (JSON-ready, as ``graph.json`` stores ``Node.batch``)."""
    found = {}
    for key, value in attrs.items():
        if isinstance(value, (list, tuple)):
            positions = [i for i, d in enumerate(value) if isinstance(d, BatchDim)]
            if positions:
                found[key] = positions
                exprs = [[i, [list(s) for s in value[i].steps]] for i in positions if value[i].steps]
                if exprs:
                    found[key + EXPR_SUFFIX] = exprs
    return found


def batch_steps(node_batch: dict, attr: str) -> dict:
    """Position -> steps for the positions of ``attr`` holding an expression of the batch
    (positions in ``node_batch[attr]`` absent here hold the batch itself)."""
    return {int(i): tuple((str(op), int(k)) for op, k in steps) for i, steps in node_batch.get(attr + EXPR_SUFFIX, ())}


def batch_dims_at(node_batch: dict, attr: str, batch: int) -> dict:
    """Position -> the dim it holds at batch size ``batch``, for every marked position."""
    steps = batch_steps(node_batch, attr)
    return {int(i): apply_steps(steps.get(int(i), ()), batch) for i in node_batch.get(attr, ())}


def same_shape(shape, target) -> bool:
    """Whether reshaping/expanding ``shape`` to ``target`` is a no-op at every batch size:
    equal, and no position of ``target`` is the batch where ``shape``'s is a plain int
    (at batch size 1, ``expand(x.shape[0], -1)`` of a ``(1, n)`` tensor is still an op)."""
    return list(shape) == list(target) and all(
        not isinstance(b, BatchDim) or (isinstance(a, BatchDim) and a.steps == b.steps) for a, b in zip(shape, target))
