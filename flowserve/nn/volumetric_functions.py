"""3-d convolution and pooling as composites of the 2-d primitives.

A 3-d convolution is a sum over the kernel's depth taps of 2-d convolutions: for tap ``k``
the input planes ``d * stride + k * dilation`` (d over the output depth) are stacked into
the batch, convolved with the kernel's slice ``k``, and the results added. Max pooling is the
elementwise maximum of 2-d max pooling over the same depth taps. A transposed 3-d
convolution is, per depth tap, a 2-d transposed convolution of every input plane, spread
along the depth at ``stride`` (zeros between) and shifted by ``tap * dilation``, then summed
and cropped by ``padding``. Adaptive average pooling is the 2-d one over (H, W) then over the
depth; adaptive max pooling takes the maximum of each of PyTorch's adaptive windows. So they
differentiate, trace into ``nn.Graph`` and export (as ``Conv``/``ConvTranspose``/``MaxPool``
nodes) with no rules of their own.
"""

from __future__ import annotations

import math

from flowserve import dtypes
from flowserve.ops import conv as conv_ops
from flowserve.ops.autocast_policy import float32, lower_precision
from flowserve.ops import functional as ops_functional
from flowserve.ops import pool
from flowserve.ops.padding import pad
from flowserve.ops.registry import fail_shape


__all__ = ["conv3d", "max_pool3d", "avg_pool3d", "conv_transpose3d", "adaptive_avg_pool3d",
           "adaptive_max_pool3d"]


def _triple(v, name: str) -> tuple:
    return tuple(conv_ops.tuple_arg(v, 3, name, "conv3d"))


def _depth_taps(x, depth_out: int, taps: int, stride: int, dilation: int):
    """Per depth tap, the input planes it reads, stacked into the batch: (N * Do, C, H, W)."""
    n, c, _, h, w = x.shape
    for k in range(taps):
        start = k * dilation
        planes = ops_functional.slice_axis(x, 2, start, start + (depth_out - 1) * stride + 1, stride)
        yield ops_functional.reshape(ops_functional.permute(planes, (0, 2, 1, 3, 4)), (n * depth_out, c, h, w))


def _unstack(y, n: int, depth_out: int):
    """(N * Do, C, H, W) back to (N, C, Do, H, W)."""
    return ops_functional.permute(ops_functional.reshape(y, (n, depth_out) + tuple(y.shape[1:])), (0, 2, 1, 3, 4))


@lower_precision
def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):  # noqa: A002
    """``torch.nn.functional.conv3d`` over (N, C, D, H, W)."""
    if input.ndim != 5 or weight.ndim != 5 or input.shape[1] != weight.shape[1] * groups:
        fail_shape("conv3d", f"input (N, {weight.shape[1] * groups}, D, H, W) and a 5-d weight",
                   (tuple(input.shape), tuple(weight.shape)))
    stride, padding, dilation = _triple(stride, "stride"), _triple(padding, "padding"), _triple(dilation, "dilation")
    if padding[0]:
        input = pad(input, [0, 0, 0, 0, padding[0], padding[0]])
    taps = weight.shape[2]
    depth_out = (input.shape[2] - dilation[0] * (taps - 1) - 1) // stride[0] + 1
    if depth_out < 1:
        fail_shape("conv3d", "an input at least as deep as the (dilated) kernel", tuple(input.shape))
    out = None
    for k, planes in enumerate(_depth_taps(input, depth_out, taps, stride[0], dilation[0])):
        kernel = ops_functional.squeeze(ops_functional.slice_axis(weight, 2, k, k + 1), 2)
        term = conv_ops.conv_nd(planes, kernel, None, stride[1:], padding[1:], dilation[1:], groups, 2, "conv3d")
        out = term if out is None else out + term
    out = _unstack(out, input.shape[0], depth_out)
    return out if bias is None else out + ops_functional.reshape(bias, (1, -1, 1, 1, 1))


@float32
def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,  # noqa: A002
               return_indices: bool = False):
    """``torch.nn.functional.max_pool3d`` over (N, C, D, H, W) (no ``ceil_mode``/indices)."""
    if input.ndim != 5:
        fail_shape("max_pool3d", "input (N, C, D, H, W)", tuple(input.shape))
    if ceil_mode or return_indices:
        raise ValueError("max_pool3d: ceil_mode and return_indices are not available in flowserve")
    kernel = _triple(kernel_size, "kernel_size")
    stride = _triple(stride if stride is not None else kernel_size, "stride")
    padding, dilation = _triple(padding, "padding"), _triple(dilation, "dilation")
    if padding[0]:
        input = pad(input, [0, 0, 0, 0, padding[0], padding[0]], value=float("-inf"))
    depth_out = (input.shape[2] - dilation[0] * (kernel[0] - 1) - 1) // stride[0] + 1
    out = None
    for planes in _depth_taps(input, depth_out, kernel[0], stride[0], dilation[0]):
        term = pool.max_pool2d(planes, kernel=list(kernel[1:]), stride=list(stride[1:]),
                               pads=list(padding[1:]), dilation=list(dilation[1:]),
                               ceil_mode=False)
        out = term if out is None else ops_functional.maximum(out, term)
    return _unstack(out, input.shape[0], depth_out)


@float32
def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode: bool = False,  # noqa: A002
               count_include_pad: bool = True, divisor_override=None):
    """``torch.nn.functional.avg_pool3d`` (zero padding counted, as PyTorch's default)."""
    if ceil_mode or not count_include_pad or divisor_override is not None:
        raise ValueError("avg_pool3d: only ceil_mode=False, count_include_pad=True and no divisor_override "
                         "are available in flowserve")
    kernel = _triple(kernel_size, "kernel_size")
    channels = input.shape[1]
    ones = ops_functional.expand(ops_functional.scalar_tensor(1.0 / (kernel[0] * kernel[1] * kernel[2]), input.dtype, input.device),
                    [channels, 1, *kernel])
    return conv3d(input, ones, None, stride if stride is not None else kernel, padding, 1, channels)


@lower_precision
def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups: int = 1,  # noqa: A002
                     dilation=1):
    """``torch.nn.functional.conv_transpose3d`` over (N, C, D, H, W); weight (C, O/groups, kD, kH, kW)."""
    if input.ndim != 5 or weight.ndim != 5 or input.shape[1] != weight.shape[0]:
        fail_shape("conv_transpose3d", f"input (N, {weight.shape[0]}, D, H, W) and a 5-d weight",
                   (tuple(input.shape), tuple(weight.shape)))
    stride, padding, dilation = _triple(stride, "stride"), _triple(padding, "padding"), _triple(dilation, "dilation")
    output_padding = _triple(output_padding, "output_padding")
    if any(o >= max(s, d) or o < 0 for o, s, d in zip(output_padding, stride, dilation)):
        raise ValueError(f"conv_transpose3d expected output_padding >= 0 and smaller than stride or dilation, got "
                         f"output_padding={output_padding}, stride={stride}, dilation={dilation}")
    n, _, depth, h, w = input.shape
    taps, s, dil = weight.shape[2], stride[0], dilation[0]
    depth_out = (depth - 1) * s - 2 * padding[0] + dil * (taps - 1) + output_padding[0] + 1
    if depth_out < 1:
        fail_shape("conv_transpose3d", "a positive output depth", (tuple(input.shape), tuple(weight.shape)))
    planes = ops_functional.reshape(ops_functional.permute(input, (0, 2, 1, 3, 4)), (n * depth, input.shape[1], h, w))
    full = (depth - 1) * s + 1  # the input planes spread at the stride
    length = max((depth - 1) * s + dil * (taps - 1) + 1, padding[0] + depth_out)
    out = None
    for k in range(taps):
        kernel = ops_functional.squeeze(ops_functional.slice_axis(weight, 2, k, k + 1), 2)
        y = conv_ops.conv_transpose_nd(planes, kernel, None, stride[1:], padding[1:], output_padding[1:], groups,
                                dilation[1:], 2, "conv_transpose3d")
        y = ops_functional.reshape(y, (n, depth, 1) + tuple(y.shape[1:]))  # (N, D, 1, O, Ho, Wo)
        if s > 1:  # zeros between the planes: (N, D * s, O, Ho, Wo), cut after the last plane
            y = ops_functional.slice_axis(ops_functional.reshape(pad(y, [0, 0, 0, 0, 0, 0, 0, s - 1]), (n, depth * s) + tuple(y.shape[3:])),
                             1, 0, full)
        else:
            y = ops_functional.squeeze(y, 2)
        shift = k * dil
        y = pad(y, [0, 0, 0, 0, 0, 0, shift, length - shift - full])
        out = y if out is None else out + y
    out = ops_functional.permute(ops_functional.slice_axis(out, 1, padding[0], padding[0] + depth_out), (0, 2, 1, 3, 4))
    return out if bias is None else out + ops_functional.reshape(bias, (1, -1, 1, 1, 1))


def _adaptive_size(output_size, size: tuple, name: str) -> tuple:
    out = (output_size,) * 3 if isinstance(output_size, int) else tuple(output_size)
    if len(out) != 3:
        raise ValueError(f"{name} expected output_size as an int or 3 values, got {output_size!r}")
    out = tuple(s if o is None else int(o) for o, s in zip(out, size))
    if min(out) < 1:
        raise ValueError(f"{name} expected a positive output_size, got {output_size!r}")
    return out


def _as_5d(input, name: str):  # noqa: A002
    if input.ndim not in (4, 5):
        fail_shape(name, "input (N, C, D, H, W) or (C, D, H, W)", tuple(input.shape))
    return (input, False) if input.ndim == 5 else (ops_functional.unsqueeze(input, 0), True)


@float32
def adaptive_avg_pool3d(input, output_size):  # noqa: A002
    """``torch.nn.functional.adaptive_avg_pool3d``: PyTorch's adaptive windows, any output size."""
    x, unbatched = _as_5d(input, "adaptive_avg_pool3d")
    n, c, d, h, w = x.shape
    od, oh, ow = _adaptive_size(output_size, (d, h, w), "adaptive_avg_pool3d")
    y = pool.adaptive_avg_pool2d(ops_functional.reshape(x, (n, c * d, h, w)), (oh, ow))  # over (H, W)
    y = pool.adaptive_avg_pool2d(ops_functional.reshape(y, (n, c, d, oh * ow)), (od, oh * ow))  # then over D
    y = ops_functional.reshape(y, (n, c, od, oh, ow))
    return ops_functional.squeeze(y, 0) if unbatched else y


def _bounds(size: int, out: int) -> list:
    return [(math.floor(i * size / out), math.ceil((i + 1) * size / out)) for i in range(out)]


def adaptive_max_pool3d(input, output_size, return_indices: bool = False):  # noqa: A002
    """``torch.nn.functional.adaptive_max_pool3d``: the maximum of each of PyTorch's adaptive
    windows (``floor(i*D/d)`` to ``ceil((i+1)*D/d)`` per dim); with ``return_indices``, also
    the position of each maximum in its (D, H, W) volume (the first one on ties, as PyTorch)."""
    x, unbatched = _as_5d(input, "adaptive_max_pool3d")
    n, c, d, h, w = x.shape
    out = _adaptive_size(output_size, (d, h, w), "adaptive_max_pool3d")
    values, indices = [], []
    for d0, d1 in _bounds(d, out[0]):
        for h0, h1 in _bounds(h, out[1]):
            for w0, w1 in _bounds(w, out[2]):
                cell = ops_functional.slice_axis(
                    ops_functional.slice_axis(ops_functional.slice_axis(x, 2, d0, d1), 3, h0, h1), 4, w0, w1
                )
                flat = ops_functional.reshape(cell, (n, c, (d1 - d0) * (h1 - h0) * (w1 - w0)))
                values.append(ops_functional.amax(flat, 2, keepdim=True))
                if return_indices:
                    j = ops_functional.argmax(flat, 2, keepdim=True)
                    cw, chw = w1 - w0, (h1 - h0) * (w1 - w0)
                    indices.append((j // chw + d0) * (h * w) + (j % chw // cw + h0) * w + (j % cw + w0))
    shape = (n, c) + out
    y = ops_functional.reshape(ops_functional.cat(values, 2), shape)
    y = ops_functional.squeeze(y, 0) if unbatched else y
    if not return_indices:
        return y
    idx = ops_functional.reshape(ops_functional.cat(indices, 2), shape)
    return y, ops_functional.cast(ops_functional.squeeze(idx, 0) if unbatched else idx, dtypes.int64)
