"""``Tensor`` in-place methods (``x.add_(y)``, ``x += y``, ``x.unsqueeze_()``, ...), following
PyTorch's rules:

- ``x.add_(y)`` computes ``x + y`` and stores it in ``x`` (a functional update through
  ``Tensor._assign``, so it also works inside ``nn.Graph.build``);
- the result must keep ``x``'s size (no broadcasting ``x`` up) and be castable to ``x``'s
  dtype (a float result cannot go into an integer tensor);
- a leaf tensor that requires grad refuses in-place updates while grad mode is on.

Each in-place method is made from its out-of-place method of the other groups by ``inplace``."""

from __future__ import annotations

from types import MappingProxyType

from flowserve import dtypes
from flowserve.errors import DTypeError, ShapeError
from flowserve.ops.tensor_methods.arithmetic import ArithmeticMethods as Arith
from flowserve.ops.tensor_methods.comparison import ComparisonMethods as Compare
from flowserve.ops.tensor_methods.indexing import IndexingMethods as Index
from flowserve.ops.tensor_methods.shape import ShapeMethods as Shape

_TORCH_NAMES = MappingProxyType({"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16",
                                 "int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte",
                                 "bool": "Bool"})


def _kind(dt: dtypes.dtype) -> int:
    return 0 if dt is dtypes.bool_ else (2 if dt.is_floating_point else 1)


def check_inplace(op: str, target, result) -> None:
    """PyTorch's rules for storing ``result`` of an in-place op into ``target``."""
    if _kind(result.dtype) > _kind(target.dtype):
        raise DTypeError(f"{op}: result type {_TORCH_NAMES[result.dtype.name]} can't be cast to the "
                         f"desired output type {_TORCH_NAMES[target.dtype.name]}")
    if tuple(result.shape) != tuple(target.shape):
        raise ShapeError(f"{op}: output with shape {list(target.shape)} doesn't match the "
                         f"broadcast shape {list(result.shape)}")


def inplace(fn, name: str | None = None):
    """``x.name_(...)``: ``fn(x, ...)`` stored into ``x`` (``name`` defaults to ``fn``'s)."""
    name = (name or fn.__name__) + "_"

    def method(self, *args, **kwargs):
        result = fn(self, *args, **kwargs)
        check_inplace(name, self, result)
        return self._assign(result)

    method.__name__ = method.__qualname__ = name
    return method


def reshaping_inplace(fn):
    """``x.unsqueeze_()`` and friends: ``x`` takes the result's size and value."""

    def method(self, *args, **kwargs):
        result = fn(self, *args, **kwargs)
        if self._lazy is not None:
            self._lazy = result._lazy
        else:
            self._unshare()  # a new size: its detach() aliases keep the old one
            self._data = result._data
            self._version += 1
        if result.requires_grad and not self.is_leaf:
            self._node, self._out_index = result._node, result._out_index
        return self

    method.__name__ = method.__qualname__ = fn.__name__ + "_"
    return method


class InplaceMethods:
    """``x.op_(...)`` for the elementwise ops, and the augmented assignments (``x += y``)."""

    __slots__ = ()

    __iadd__ = add_ = inplace(Arith.add)
    __isub__ = sub_ = inplace(Arith.sub)
    __imul__ = mul_ = inplace(Arith.mul)
    __itruediv__ = div_ = inplace(Arith.div)
    true_divide_ = inplace(Arith.div, "true_divide")
    __ipow__ = pow_ = inplace(Arith.pow)
    __imod__ = remainder_ = inplace(Arith.remainder)
    __ifloordiv__ = floor_divide_ = inplace(Arith.floor_divide)
    __iand__ = bitwise_and_ = inplace(Compare.bitwise_and)
    __ior__ = bitwise_or_ = inplace(Compare.bitwise_or)
    __ixor__ = bitwise_xor_ = inplace(Compare.bitwise_xor)
    bitwise_not_ = inplace(Compare.bitwise_not)
    neg_, abs_, sign_, square_ = inplace(Arith.neg), inplace(Arith.abs), inplace(Arith.sign), inplace(Arith.square)
    exp_, log_, sqrt_, rsqrt_ = inplace(Arith.exp), inplace(Arith.log), inplace(Arith.sqrt), inplace(Arith.rsqrt)
    tanh_, sigmoid_, relu_ = inplace(Arith.tanh), inplace(Arith.sigmoid), inplace(Arith.relu)
    clamp_, clip_ = inplace(Arith.clamp), inplace(Arith.clamp, "clip")
    clamp_min_, clamp_max_ = inplace(Arith.clamp_min), inplace(Arith.clamp_max)
    maximum_, minimum_ = inplace(Arith.maximum), inplace(Arith.minimum)
    sin_, cos_, tan_ = inplace(Arith.sin), inplace(Arith.cos), inplace(Arith.tan)
    erf_, erfinv_ = inplace(Arith.erf), inplace(Arith.erfinv)
    expm1_, log1p_ = inplace(Arith.expm1), inplace(Arith.log1p)
    log2_, log10_ = inplace(Arith.log2), inplace(Arith.log10)
    floor_, ceil_, round_ = inplace(Arith.floor), inplace(Arith.ceil), inplace(Arith.round)
    trunc_, frac_ = inplace(Arith.trunc), inplace(Arith.frac)
    fmod_, reciprocal_ = inplace(Arith.fmod), inplace(Arith.reciprocal)
    addcmul_, addcdiv_, lerp_ = inplace(Arith.addcmul), inplace(Arith.addcdiv), inplace(Arith.lerp)
    eq_, ne_, lt_ = inplace(Compare.eq), inplace(Compare.ne), inplace(Compare.lt)
    le_, gt_, ge_ = inplace(Compare.le), inplace(Compare.gt), inplace(Compare.ge)
    logical_and_, logical_or_ = inplace(Compare.logical_and), inplace(Compare.logical_or)
    logical_xor_, logical_not_ = inplace(Compare.logical_xor), inplace(Compare.logical_not)
    masked_fill_ = inplace(Index.masked_fill)
    scatter_, scatter_add_ = inplace(Index.scatter), inplace(Index.scatter_add)
    index_add_, index_copy_ = inplace(Index.index_add), inplace(Index.index_copy)
    index_fill_ = inplace(Index.index_fill)
    tril_, triu_ = inplace(Index.tril), inplace(Index.triu)

    unsqueeze_, squeeze_ = reshaping_inplace(Shape.unsqueeze), reshaping_inplace(Shape.squeeze)
    t_, transpose_ = reshaping_inplace(Shape.t), reshaping_inplace(Shape.transpose)
    flatten_ = reshaping_inplace(Shape.flatten)
