"""``Tensor``'s op methods, one mixin class per concept, which ``Tensor`` inherits from:

| class | file | holds |
|---|---|---|
| ``ArithmeticMethods`` | ``arithmetic.py`` | ``+ - * / ** @ % //``, elementwise math, matrix products |
| ``ComparisonMethods`` | ``comparison.py`` | ``== != < <= > >=``, logical and bitwise ops, ``isclose`` |
| ``ShapeMethods`` | ``shape.py`` | ``reshape``, ``view``, ``permute``, ``T``, ``expand``, strides |
| ``ReductionMethods`` | ``reduction.py`` | ``sum``, ``mean``, ``max``, ``var``, ``norm``, ``cumsum`` |
| ``IndexingMethods`` | ``indexing.py`` | ``x[i]``, ``x[i] = v``, ``gather``, ``scatter``, ``topk``, ``sort`` |
| ``InplaceMethods`` | ``inplace.py`` | ``x.add_(y)``, ``x += y``, ``x.unsqueeze_()`` (PyTorch's in-place rules) |
| ``FillMethods`` | ``filling.py`` | ``fill_``, random fills, ``new_zeros``/``new_full``/... |
| ``ConversionMethods`` | ``conversion.py`` | ``to``, ``byte()``, ``clone``, ``copy_``, ``itemsize``, ``is_global`` |
| ``AutogradMethods`` | ``autograd.py`` | ``backward`` |
| ``MissingAttributes`` | here | PyTorch/OneFlow attributes flowserve lacks, each saying what to use |

A method is the op function itself wherever the signatures agree (``add = functional.add``),
so operators cost no call beyond the op.
"""

from __future__ import annotations

from flowserve._missing import ADVICE, missing
from flowserve.ops.tensor_methods.arithmetic import ArithmeticMethods
from flowserve.ops.tensor_methods.autograd import AutogradMethods
from flowserve.ops.tensor_methods.comparison import ComparisonMethods
from flowserve.ops.tensor_methods.conversion import ConversionMethods
from flowserve.ops.tensor_methods.filling import FillMethods
from flowserve.ops.tensor_methods.indexing import IndexingMethods
from flowserve.ops.tensor_methods.inplace import InplaceMethods, check_inplace
from flowserve.ops.tensor_methods.reduction import ReductionMethods
from flowserve.ops.tensor_methods.shape import ShapeMethods


def _absent(name: str) -> property:
    """A PyTorch/OneFlow tensor attribute flowserve lacks: reading it raises the AttributeError
    that says what to use instead (and ``hasattr`` is False). A property per known name, not
    ``Tensor.__getattr__``, which would slow every attribute access of every tensor."""

    def read(self):
        raise missing("Tensor", name)

    return property(read)


MissingAttributes = type("MissingAttributes", (), {
    "__slots__": (), "__doc__": "Tensor attributes of PyTorch/OneFlow that flowserve lacks (see ``_missing``).",
    **{name: _absent(name) for name in ADVICE["Tensor"]}})

GROUPS = (ArithmeticMethods, ComparisonMethods, ShapeMethods, ReductionMethods, IndexingMethods, InplaceMethods,
          FillMethods, ConversionMethods, AutogradMethods, MissingAttributes)

__all__ = ["GROUPS", "ArithmeticMethods", "AutogradMethods", "ComparisonMethods", "ConversionMethods",
           "FillMethods", "IndexingMethods", "InplaceMethods", "MissingAttributes", "ReductionMethods",
           "ShapeMethods", "check_inplace"]
