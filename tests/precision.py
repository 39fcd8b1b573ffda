"""The tolerance a low-precision result may differ by from another library's: the one place
tests that compare float16/bfloat16 numbers with PyTorch (or with ONNX Runtime) take it from.

Two correct implementations of the same float16/bfloat16 op may differ by a rounding: they
accumulate in another order or width (oneDNN's kernels differ between Intel and AMD CPUs),
and a float32 result on a rounding boundary then rounds to the neighbouring low-precision
value. One rounding costs at most one unit in the last place (``EPS``: 2^-10 for float16,
2^-7 for bfloat16) of the output's scale; a sum of ``terms`` products accumulated in the
format may lose about ``log2(terms)`` more (pairwise summation's bound).
"""

from __future__ import annotations

import math

import numpy as np

EPS = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2.0 ** -23, "float64": 2.0 ** -52}


def dtype_name(dtype) -> str:
    """``"float16"`` for flow.float16, torch.float16, numpy's float16 or the string itself."""
    name = getattr(dtype, "name", None) if not isinstance(dtype, str) else dtype
    return str(name or dtype).replace("torch.", "")


def low_precision_atol(dtype, ref, roundings: float = 1, terms: int = 1) -> float:
    """The absolute tolerance for a result in ``dtype`` compared with ``ref`` computed elsewhere:
    ``roundings`` units in the last place of the result's scale (at least 1.0), plus
    ``log2(terms)`` more for an op that accumulates ``terms`` products."""
    ref = np.asarray(ref, np.float64)
    scale = max(1.0, float(np.abs(ref).max())) if ref.size else 1.0
    steps = roundings + (math.ceil(math.log2(terms)) if terms > 1 else 0)
    return steps * EPS[dtype_name(dtype)] * scale


def assert_close_in_format(got, ref, dtype, roundings: float = 1, terms: int = 1, err_msg: str = "") -> None:
    """``got`` equals ``ref`` up to what ``dtype``'s rounding allows (``low_precision_atol``)."""
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    atol = low_precision_atol(dtype, ref, roundings, terms)
    np.testing.assert_allclose(got, ref, rtol=0, atol=atol, err_msg=err_msg)
