"""The ONNX versions flowserve writes, pinned to what the installed ONNX Runtime loads.

onnx >= 1.23 writes IR version 14 by default, which ONNX Runtime 1.31 refuses; every
model flowserve makes states its IR version and opset explicitly.
"""

from __future__ import annotations

import onnx

DEFAULT_OPSET = 21
IR_VERSION_FOR_OPSET = {17: 8, 18: 8, 19: 9, 20: 9, 21: 10, 22: 10, 23: 11, 24: 12, 25: 13, 26: 13}
MIN_OPSET = 18  # ReduceSum/ReduceMax take axes as an input, ScatterElements has reduction="max"
MS_DOMAIN = "com.microsoft"
FLOWSERVE_DOMAIN = "flowserve"


def ir_version(opset: int) -> int:
    if opset not in IR_VERSION_FOR_OPSET:
        raise ValueError(f"opset must be one of {sorted(IR_VERSION_FOR_OPSET)}, got {opset}")
    return IR_VERSION_FOR_OPSET[opset]


def max_runtime_opset() -> int:
    """The newest opset both onnx and the installed ONNX Runtime know."""
    return min(onnx.defs.onnx_opset_version(), max(IR_VERSION_FOR_OPSET))
