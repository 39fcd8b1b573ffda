"""ONNX lowering of fake quantization (``flowserve.ops.fake_quant``) as QDQ.

* constant input (a weight, once the exporter has folded BatchNorm into it): the integers
  are computed here with the kernel's rounding and stored as an int8/uint8 initializer,
  read by one ``DequantizeLinear`` (the form ``quantize_static`` writes for weights);
* float32 input: ``QuantizeLinear`` + ``DequantizeLinear`` (ONNX Runtime fuses such pairs
  around ``Conv``, ``Gemm``, ``MatMul``, ``Add`` into integer kernels), the result clamped to
  ``[(quant_min - zp) * scale, (quant_max - zp) * scale]`` where the range is narrower than
  the integer type's (``QuantizeLinear`` saturates to the type's range only);
* otherwise (float64, float16, ranges beyond 8 bits): the same arithmetic in the input's
  dtype (``Div`` by the scale, ``Round`` half to even, ``Clip``, back).
"""

from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from flowserve import dtypes
from flowserve.onnx_backend.builder import onnx_dtype
from flowserve.onnx_backend.lowering.registry import lowering
from flowserve.ops import fake_quant as prims
from flowserve.ops.fake_quant import qparam_shape, quantize_array


def integer_type(quant_min: int, quant_max: int):
    """The 8-bit numpy type that holds ``[quant_min, quant_max]``, or None."""
    if 0 <= quant_min and quant_max <= 255:
        return np.uint8
    if -128 <= quant_min and quant_max <= 127:
        return np.int8
    return None


def _constant(b, name: str):
    tensor = b.initializers.get(name)
    return None if tensor is None else numpy_helper.to_array(tensor)


@lowering(prims.fake_quant)
def lower_fake_quant(b, node, ctx):
    x, scale, zero_point = node.inputs
    qmin, qmax, axis = node.attrs["quant_min"], node.attrs["quant_max"], node.attrs.get("axis")
    meta = ctx.meta(x)
    axis = None if axis is None else axis % len(meta.shape)
    itype = integer_type(qmin, qmax)
    if itype is None or meta.dtype != "float32":
        _lower_arithmetic(b, node, meta, axis)
        return
    values = [_constant(b, n) for n in node.inputs]
    qdq_attrs = {} if axis is None else {"axis": axis}
    if values[1] is not None and values[2] is not None:  # exported: constant scale and zero point,
        shape = () if axis is None else values[1].shape  # scalars per tensor (ONNX Runtime's QLinearAdd
        scale = b.initializer(b.fresh(f"{x}_scale"), values[1].reshape(shape))  # takes no other shape)
        zp = b.initializer(b.fresh(f"{x}_zero_point"), values[2].reshape(shape).astype(itype))
        if values[0] is not None:  # a weight: store its integers
            q = quantize_array(np, values[0], values[1], values[2], qmin, qmax, axis).astype(itype)
            b.op("DequantizeLinear", [b.initializer(b.fresh(f"{x}_quantized"), q), scale, zp], node.outputs,
                 **qdq_attrs)
            return
    else:
        if axis is None:
            scale = b.op1("Reshape", [scale, b.const(np.zeros(0, np.int64))])
            zero_point = b.op1("Reshape", [zero_point, b.const(np.zeros(0, np.int64))])
        zp = b.op1("Cast", [zero_point], to=onnx_dtype("uint8" if itype is np.uint8 else "int8"))
    info = np.iinfo(itype)
    narrower = qmin > info.min or qmax < info.max
    dq = b.fresh(node.outputs[0]) if narrower else node.outputs[0]
    b.op("DequantizeLinear", [b.op1("QuantizeLinear", [x, scale, zp], **qdq_attrs), scale, zp], [dq],
         **qdq_attrs)
    if narrower:
        shape = b.const(qparam_shape(meta.shape, axis))
        s, z = b.op1("Reshape", [scale, shape]), b.op1("Reshape", [zero_point, shape])
        lo = b.op1("Mul", [b.op1("Sub", [b.const(float(qmin), np.float32), z]), s])
        hi = b.op1("Mul", [b.op1("Sub", [b.const(float(qmax), np.float32), z]), s])
        b.op("Min", [b.op1("Max", [dq, lo]), hi], node.outputs)


def _lower_arithmetic(b, node, meta, axis) -> None:
    x, scale, zero_point = node.inputs
    np_dtype = dtypes.from_name(meta.dtype).np
    shape = b.const(qparam_shape(meta.shape, axis))
    s, z = b.op1("Reshape", [scale, shape]), b.op1("Reshape", [zero_point, shape])
    q = b.op1("Add", [b.op1("Round", [b.op1("Div", [x, s])]), z])
    q = b.op1("Min", [b.op1("Max", [q, b.const(float(node.attrs["quant_min"]), np_dtype)]),
                      b.const(float(node.attrs["quant_max"]), np_dtype)])
    b.op("Mul", [b.op1("Sub", [q, z]), s], node.outputs)
