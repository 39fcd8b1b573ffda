"""Convolution primitives: ``conv`` and ``conv_transpose`` over 1 or 2 spatial dims.

Attributes follow ONNX: ``stride``/``dilation`` per spatial dim, ``pads`` as all begins then
all ends (``[top, left, bottom, right]``), ``groups``. The kernels run on windows of the
padded input (``sliding_window_view``) with one matrix product (dense), a batched product
(grouped), or one multiply-add per kernel tap (depthwise): never a loop over pixels.

The gradients are convolutions too: the input gradient of ``conv`` is a ``conv_transpose``
with the same weight, and its weight gradient is a grouped ``conv`` of the transposed input
with the transposed output gradient as kernel (strides and dilations swapped), sliced to the
kernel size. Both lower to plain ONNX ``Conv``/``ConvTranspose``.
"""

from __future__ import annotations

from flowserve.ops import shape as shape_ops
from flowserve.ops.conv_kernels import conv2d as _conv2d
from flowserve.ops.conv_kernels import conv_out_size, conv_transpose_out_size
from flowserve.ops.conv_kernels import conv_transpose2d as _conv_transpose2d
from flowserve.ops.registry import Meta, fail_dtype, fail_shape, primitive


def _check_common(op: str, x: Meta, w: Meta, stride, pads, dilation, groups) -> int:
    if x.dtype is not w.dtype:
        fail_dtype(op, "input and weight of one dtype", f"{x.dtype} and {w.dtype}")
    if not x.dtype.is_floating_point:
        fail_dtype(op, "a floating point input", x.dtype)
    r = x.ndim - 2
    if r not in (1, 2) or w.ndim != x.ndim:
        fail_shape(op, "input (N, C, L) or (N, C, H, W) and a weight of as many dims",
                   f"input {tuple(x.shape)}, weight {tuple(w.shape)}")
    if len(stride) != r or len(dilation) != r or len(pads) != 2 * r:
        fail_shape(op, f"stride, dilation of {r} and pads of {2 * r} values",
                   f"stride={stride}, dilation={dilation}, pads={pads}")
    if groups < 1 or min(stride) < 1 or min(dilation) < 1 or min(pads) < 0:
        fail_shape(op, "groups, stride, dilation >= 1 and pads >= 0",
                   f"groups={groups}, stride={stride}, dilation={dilation}, pads={pads}")
    return r


def _conv_meta(x: Meta, w: Meta, stride: list, pads: list, dilation: list, groups: int) -> Meta:
    r = _check_common("conv", x, w, stride, pads, dilation, groups)
    if x.shape[1] != w.shape[1] * groups or w.shape[0] % groups:
        fail_shape("conv", f"input channels = {w.shape[1]} x groups {groups} and output channels "
                   f"divisible by groups", f"input {tuple(x.shape)}, weight {tuple(w.shape)}")
    out = [conv_out_size(x.shape[2 + i], w.shape[2 + i], stride[i], pads[i], pads[r + i], dilation[i])
           for i in range(r)]
    if min(out) < 1:
        fail_shape("conv", "an input at least as large as the (dilated) kernel after padding",
                   f"input {tuple(x.shape)}, weight {tuple(w.shape)}, pads {pads}")
    return Meta((x.shape[0], w.shape[0], *out), x.dtype)


def _conv_transpose_meta(x: Meta, w: Meta, stride: list, pads: list, dilation: list, groups: int,
                         output_padding: list) -> Meta:
    r = _check_common("conv_transpose", x, w, stride, pads, dilation, groups)
    if x.shape[1] != w.shape[0] or w.shape[0] % groups:
        fail_shape("conv_transpose", f"input channels = weight's first dim {w.shape[0]} (divisible by "
                   f"groups {groups})", f"input {tuple(x.shape)}, weight {tuple(w.shape)}")
    if len(output_padding) != r or any(o >= max(s, d) or o < 0
                                       for o, s, d in zip(output_padding, stride, dilation)):
        fail_shape("conv_transpose", "output_padding >= 0 and smaller than stride or dilation",
                   f"output_padding={output_padding}, stride={stride}, dilation={dilation}")
    out = [conv_transpose_out_size(x.shape[2 + i], w.shape[2 + i], stride[i], pads[i], pads[r + i],
                                   dilation[i], output_padding[i]) for i in range(r)]
    if min(out) < 1:
        fail_shape("conv_transpose", "a positive output size", f"{tuple(out)} for input {tuple(x.shape)}")
    return Meta((x.shape[0], w.shape[1] * groups, *out), x.dtype)


# -- kernels (conv_kernels.py; 1-D inputs run as height-1 images) --------------------------


def _as_2d(x, w, stride, pads, dilation, extra=None):
    if x.ndim == 4:
        return x, w, stride, pads, dilation, extra
    extra = [0] + list(extra) if extra is not None else None
    return (x[:, :, None], w[:, :, None], [1, stride[0]], [0, pads[0], 0, pads[1]], [1, dilation[0]], extra)


# -- gradients ----------------------------------------------------------------------------


def weight_grad(x, g, kernel, stride, pads, dilation, groups):
    """d(conv(x, w))/dw contracted with output gradient ``g``: (O, C/groups, *kernel).

    A grouped conv whose batch is the group's input channels, whose input channels are
    (group, sample) and whose kernel is the output gradient, with stride and dilation swapped.
    """
    n, c = x.shape[:2]
    o, r = g.shape[1], x.ndim - 2
    cg, og = c // groups, o // groups
    spatial = list(range(3, 3 + r))
    xt = x.reshape([n, groups, cg, *x.shape[2:]]).permute([2, 1, 0, *spatial])
    xt = xt.reshape([cg, groups * n, *x.shape[2:]])
    gt = g.reshape([n, groups, og, *g.shape[2:]]).permute([1, 2, 0, *spatial])
    gt = gt.reshape([groups * og, n, *g.shape[2:]])
    out = conv(xt, gt, stride=list(dilation), pads=list(pads), dilation=list(stride), groups=groups)
    if list(out.shape[2:]) != list(kernel):
        out = shape_ops.slice_(out, starts=[0] * r, ends=list(kernel), axes=list(range(2, 2 + r)), steps=[1] * r)
    return out.permute([1, 0, *range(2, 2 + r)])


def _conv_vjp(ctx, g):
    x, w = ctx.inputs
    a = ctx.attrs
    r = x.ndim - 2
    gx = gw = None
    if ctx.needs(0):
        op = [x.shape[2 + i] - conv_transpose_out_size(g.shape[2 + i], w.shape[2 + i], a["stride"][i],
                                                       a["pads"][i], a["pads"][r + i], a["dilation"][i], 0)
              for i in range(r)]
        gx = conv_transpose(g, w, stride=a["stride"], pads=a["pads"], dilation=a["dilation"],
                            groups=a["groups"], output_padding=op)
    if ctx.needs(1):
        gw = weight_grad(x, g, w.shape[2:], a["stride"], a["pads"], a["dilation"], a["groups"])
    return gx, gw


@primitive("conv", shape=_conv_meta, vjp=_conv_vjp)
def conv(xp, x, w, stride: list, pads: list, dilation: list, groups: int):
    one_d = x.ndim == 3
    x2, w2, s2, p2, d2, _ = _as_2d(x, w, stride, pads, dilation)
    out = _conv2d(xp, x2, w2, s2, p2, d2, groups)
    return out[:, :, 0] if one_d else out


def _conv_transpose_vjp(ctx, g):
    x, w = ctx.inputs
    a = ctx.attrs
    gx = None
    if ctx.needs(0):
        gx = conv(g, w, stride=a["stride"], pads=a["pads"], dilation=a["dilation"], groups=a["groups"])
        r = x.ndim - 2
        if list(gx.shape[2:]) != list(x.shape[2:]):  # output_padding rows reach past x's last row
            gx = shape_ops.slice_(gx, starts=[0] * r, ends=list(x.shape[2:]), axes=list(range(2, 2 + r)), steps=[1] * r)
    gw = weight_grad(g, x, w.shape[2:], a["stride"], a["pads"], a["dilation"], a["groups"]) \
        if ctx.needs(1) else None
    return gx, gw


@primitive("conv_transpose", shape=_conv_transpose_meta, vjp=_conv_transpose_vjp)
def conv_transpose(xp, x, w, stride: list, pads: list, dilation: list, groups: int, output_padding: list):
    one_d = x.ndim == 3
    x2, w2, s2, p2, d2, op2 = _as_2d(x, w, stride, pads, dilation, output_padding)
    out = _conv_transpose2d(xp, x2, w2, s2, p2, d2, groups, op2)
    return out[:, :, 0] if one_d else out


# -- argument handling for the public functions -------------------------------------------


def tuple_arg(value, r: int, name: str, where: str) -> list:
    values = [value] * r if isinstance(value, int) else list(value)
    if len(values) != r or not all(isinstance(v, int) for v in values):
        raise ValueError(f"{where} expected {name} as an int or {r} ints, got {value!r}")
    return values


def conv_pads(padding, kernel, dilation, stride, r: int, where: str) -> list:
    """ONNX pads (begins, then ends) for PyTorch's ``padding`` (ints, "valid" or "same")."""
    if padding == "valid":
        return [0] * (2 * r)
    if padding == "same":
        if any(s != 1 for s in stride):
            raise ValueError(f"{where}: padding='same' is not supported for strided convolutions")
        total = [d * (k - 1) for d, k in zip(dilation, kernel)]
        return [t // 2 for t in total] + [t - t // 2 for t in total]
    if isinstance(padding, str):
        raise ValueError(f"{where} expected padding 'valid', 'same', an int or {r} ints, got {padding!r}")
    pads = tuple_arg(padding, r, "padding", where)
    return pads + pads


def _check_input(x, w, r: int, where: str, channels: int) -> None:
    if not x.dtype.is_floating_point or x.dtype is not w.dtype:
        fail_dtype(where, f"a floating point input of the weight's dtype {w.dtype}", x.dtype)
    names = "L" if r == 1 else "H, W"
    if x.ndim != r + 2 or x.shape[1] != channels:
        fail_shape(where, f"input (N, {channels}, {names})", tuple(x.shape))
    if w.ndim != r + 2:
        fail_shape(where, f"a weight of {r + 2} dims", tuple(w.shape))


def _with_bias(out, bias, r: int):
    if bias is None:
        return out
    return out + bias.reshape([1, bias.shape[0]] + [1] * r)


def conv_nd(x, weight, bias, stride, padding, dilation, groups: int, r: int, where: str):
    """``torch.nn.functional.conv1d/conv2d`` (``r`` spatial dims)."""
    _check_input(x, weight, r, where, weight.shape[1] * groups)
    stride = tuple_arg(stride, r, "stride", where)
    dilation = tuple_arg(dilation, r, "dilation", where)
    pads = conv_pads(padding, list(weight.shape[2:]), dilation, stride, r, where)
    out = conv(x, weight, stride=stride, pads=pads, dilation=dilation, groups=int(groups))
    return _with_bias(out, bias, r)


def conv_transpose_nd(x, weight, bias, stride, padding, output_padding, groups: int, dilation, r: int,
                      where: str):
    """``torch.nn.functional.conv_transpose1d/conv_transpose2d`` (``r`` spatial dims)."""
    _check_input(x, weight, r, where, weight.shape[0])
    stride = tuple_arg(stride, r, "stride", where)
    dilation = tuple_arg(dilation, r, "dilation", where)
    pads = tuple_arg(padding, r, "padding", where)
    out = conv_transpose(x, weight, stride=stride, pads=pads + pads, dilation=dilation, groups=int(groups),
                         output_padding=tuple_arg(output_padding, r, "output_padding", where))
    return _with_bias(out, bias, r)
