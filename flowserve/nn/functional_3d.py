"""3-d convolution and pooling as composites of the 2-d primitives.

A 3-d convolution is a sum over the kernel's depth taps of 2-d convolutions: for tap ``k``
the input planes ``d * stride + k * dilation`` (d over the output depth) are stacked into
the batch, convolved with the kernel's slice ``k``, and the results added. Max pooling is the
elementwise maximum of 2-d max pooling over the same depth taps. So they differentiate,
trace into ``nn.Graph`` and export (as ``Conv``/``MaxPool`` nodes) with no rules of their own.
"""

from __future__ import annotations

from flowserve.ops import conv as C
from flowserve.ops import functional as F
from flowserve.ops import pool
from flowserve.ops.padding import pad
from flowserve.ops.registry import fail_shape


__all__ = ["conv3d", "max_pool3d", "avg_pool3d"]


def _triple(v, name: str) -> tuple:
    return tuple(C.tuple_arg(v, 3, name, "conv3d"))


def _depth_taps(x, depth_out: int, taps: int, stride: int, dilation: int):
    """Per depth tap, the input planes it reads, stacked into the batch: (N * Do, C, H, W)."""
    n, c, _, h, w = x.shape
    for k in range(taps):
        start = k * dilation
        planes = F.slice_axis(x, 2, start, start + (depth_out - 1) * stride + 1, stride)
        yield F.reshape(F.permute(planes, (0, 2, 1, 3, 4)), (n * depth_out, c, h, w))


def _unstack(y, n: int, depth_out: int):
    """(N * Do, C, H, W) back to (N, C, Do, H, W)."""
    return F.permute(F.reshape(y, (n, depth_out) + tuple(y.shape[1:])), (0, 2, 1, 3, 4))


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
        kernel = F.squeeze(F.slice_axis(weight, 2, k, k + 1), 2)
        term = C.conv_nd(planes, kernel, None, stride[1:], padding[1:], dilation[1:], groups, 2, "conv3d")
        out = term if out is None else out + term
    out = _unstack(out, input.shape[0], depth_out)
    return out if bias is None else out + F.reshape(bias, (1, -1, 1, 1, 1))


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
        out = term if out is None else F.maximum(out, term)
    return _unstack(out, input.shape[0], depth_out)


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode: bool = False,  # noqa: A002
               count_include_pad: bool = True, divisor_override=None):
    """``torch.nn.functional.avg_pool3d`` (zero padding counted, as PyTorch's default)."""
    if ceil_mode or not count_include_pad or divisor_override is not None:
        raise ValueError("avg_pool3d: only ceil_mode=False, count_include_pad=True and no divisor_override "
                         "are available in flowserve")
    kernel = _triple(kernel_size, "kernel_size")
    channels = input.shape[1]
    ones = F.expand(F.scalar_tensor(1.0 / (kernel[0] * kernel[1] * kernel[2]), input.dtype, input.device),
                    [channels, 1, *kernel])
    return conv3d(input, ones, None, stride if stride is not None else kernel, padding, 1, channels)
