"""Pooling and resampling.

Primitives: ``max_pool2d`` (the window maxima), ``max_pool2d_indices`` (the flat index of
each maximum, ONNX ``MaxPool``'s convention: positions in the whole input, ``[0, N*C*H*W)``;
recomputed by the gradient, so inference graphs carry a plain one-output MaxPool) and
``max_pool2d_backward`` (the gradient scattered back to those positions; ONNX
``ScatterElements`` with ``reduction="add"``).

Composites (no gradient or lowering of their own): ``avg_pool2d`` is a depthwise
convolution with a ones kernel divided by PyTorch's window sizes; ``adaptive_avg_pool2d``
is a copy (windows of one pixel), a mean, a reshape-and-mean, or two matrix products with
averaging matrices; ``interpolate`` (nearest, bilinear) is two matrix products with
interpolation matrices, or a broadcast for integer nearest scales.
"""

from __future__ import annotations

import math

import numpy as np

from flowserve import dtypes
from flowserve.ops import core_functions
from flowserve.ops import conv as conv_ops
from flowserve.ops import conv_kernels
from flowserve.ops.indexing import take
from flowserve.ops.registry import Meta, fail_shape, primitive
from flowserve.tensor import from_array


def pool_out_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """PyTorch's output size; with ``ceil_mode`` the last window must start inside the input."""
    span = size + 2 * p - d * (k - 1) - 1
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _pool_out_meta(x: Meta, kernel: list, stride: list, pads: list, dilation: list, ceil_mode: bool) -> tuple:
    if x.ndim != 4:
        fail_shape("max_pool2d", "input (N, C, H, W)", tuple(x.shape))
    if any(p > k // 2 for p, k in zip(pads, kernel)):
        fail_shape("max_pool2d", "padding at most half the kernel size", f"padding {pads}, kernel {kernel}")
    out = [pool_out_size(x.shape[2 + i], kernel[i], stride[i], pads[i], dilation[i], ceil_mode) for i in range(2)]
    if min(out) < 1:
        fail_shape("max_pool2d", "an input at least as large as the (dilated) kernel",
                   f"input {tuple(x.shape)}, kernel {kernel}")
    return (x.shape[0], x.shape[1], *out)


def _max_pool_meta(x: Meta, **attrs) -> Meta:
    return Meta(_pool_out_meta(x, **attrs), x.dtype)


def _max_pool_indices_meta(x: Meta, **attrs) -> Meta:
    return Meta(_pool_out_meta(x, **attrs), dtypes.int64)


def _max_pool_vjp(ctx, g):
    x = ctx.inputs[0]
    indices = max_pool2d_indices(x, **ctx.attrs)  # recomputed: inference graphs keep one output
    return (max_pool2d_backward(g, indices, shape=list(x.shape)),)


def _lowest(xp, dtype):
    return -xp.inf if dtype.kind == "f" else xp.iinfo(dtype).min


def _running_max(xp, x, kernel, stride, pads, dilation, ceil_mode):
    """Window maxima and their flat positions in ``x``: a running max over the kernel taps."""
    n, c, h, w = x.shape
    out = [pool_out_size(x.shape[2 + i], kernel[i], stride[i], pads[i], dilation[i], ceil_mode) for i in range(2)]
    ends = [max(0, (out[i] - 1) * stride[i] + dilation[i] * (kernel[i] - 1) + 1 - x.shape[2 + i] - pads[i])
            for i in range(2)]
    padded = xp.pad(x, ((0, 0), (0, 0), (pads[0], ends[0]), (pads[1], ends[1])),
                    constant_values=_lowest(xp, x.dtype))
    win = conv_kernels.windows(xp, padded, kernel, stride, [0, 0, 0, 0], dilation)[:, :, :out[0], :out[1]]
    best = win[:, :, :, :, 0, 0].copy()
    tap = xp.zeros(best.shape, dtype=xp.int64)
    for t in range(1, kernel[0] * kernel[1]):
        value = win[:, :, :, :, t // kernel[1], t % kernel[1]]
        better = value > best
        best = xp.where(better, value, best)
        tap[better] = t
    row = xp.arange(out[0]).reshape(-1, 1) * stride[0] - pads[0] + (tap // kernel[1]) * dilation[0]
    col = xp.arange(out[1]) * stride[1] - pads[1] + (tap % kernel[1]) * dilation[1]
    plane = xp.arange(n * c, dtype=xp.int64).reshape(n, c, 1, 1) * (h * w)
    return best, plane + row * w + col


@primitive("max_pool2d", shape=_max_pool_meta, vjp=_max_pool_vjp)
def max_pool2d(xp, x, kernel: list, stride: list, pads: list, dilation: list, ceil_mode: bool):
    return _running_max(xp, x, kernel, stride, pads, dilation, ceil_mode)[0]


@primitive("max_pool2d_indices", shape=_max_pool_indices_meta, differentiable=False)
def max_pool2d_indices(xp, x, kernel: list, stride: list, pads: list, dilation: list, ceil_mode: bool):
    """Flat positions (in the whole input) of the window maxima, as ONNX MaxPool's ``Indices``."""
    return _running_max(xp, x, kernel, stride, pads, dilation, ceil_mode)[1]


def _max_pool_backward_meta(g: Meta, indices: Meta, shape: list) -> Meta:
    if tuple(g.shape) != tuple(indices.shape):
        fail_shape("max_pool2d_backward", f"indices of the gradient's size {tuple(g.shape)}", tuple(indices.shape))
    return Meta(tuple(shape), g.dtype)


def _max_pool_backward_vjp(ctx, gg):
    indices = ctx.inputs[1]
    picked = take(gg.reshape([-1]), indices.reshape([-1]), axis=0)
    return picked.reshape(indices.shape), None


@primitive("max_pool2d_backward", shape=_max_pool_backward_meta, vjp=_max_pool_backward_vjp)
def max_pool2d_backward(xp, g, indices, shape: list):
    total = math.prod(shape)
    summed = xp.bincount(indices.reshape(-1), weights=g.reshape(-1), minlength=total)
    return summed.astype(g.dtype).reshape(shape)


# -- composites ---------------------------------------------------------------------------


def _window_sizes(size: int, out: int, k: int, s: int, p: int, count_include_pad: bool) -> np.ndarray:
    """PyTorch's avg-pool divisor along one axis, per output position."""
    start = np.arange(out) * s - p
    end = np.minimum(start + k, size + p)
    if count_include_pad:
        return (end - start).astype(np.float64)
    return (np.minimum(end, size) - np.maximum(start, 0)).astype(np.float64)


def avg_pool2d(x, kernel, stride, padding, ceil_mode=False, count_include_pad=True, divisor_override=None):
    """Average pooling over (kh, kw) windows, as ``torch.nn.functional.avg_pool2d``."""
    if x.ndim != 4:
        fail_shape("avg_pool2d", "input (N, C, H, W)", tuple(x.shape))
    if any(p > k // 2 for p, k in zip(padding, kernel)):
        fail_shape("avg_pool2d", "padding at most half the kernel size", f"padding {padding}, kernel {kernel}")
    n, c, h, w = x.shape
    out = [pool_out_size(x.shape[2 + i], kernel[i], stride[i], padding[i], 1, ceil_mode) for i in range(2)]
    if min(out) < 1:
        fail_shape("avg_pool2d", "an input at least as large as the kernel", f"input {tuple(x.shape)}, kernel {kernel}")
    ends = [max(padding[i], (out[i] - 1) * stride[i] + kernel[i] - x.shape[2 + i] - padding[i]) for i in range(2)]
    ones = from_array(np.ones((c, 1, *kernel)), dtype=x.dtype, device=x.device)
    sums = conv_ops.conv(x, ones, stride=list(stride), pads=[padding[0], padding[1], ends[0], ends[1]],
                  dilation=[1, 1], groups=c)
    sums = core_functions.getitem(sums, (slice(None), slice(None), slice(0, out[0]), slice(0, out[1])))
    if divisor_override:
        return sums * (1.0 / divisor_override)
    sizes = [_window_sizes(x.shape[2 + i], out[i], kernel[i], stride[i], padding[i], count_include_pad)
             for i in range(2)]
    inverse = 1.0 / np.outer(sizes[0], sizes[1])
    return sums * from_array(inverse, dtype=x.dtype, device=x.device)


def adaptive_avg_pool2d(x, output_size):
    """Average pooling to a fixed output size, as ``torch.nn.functional.adaptive_avg_pool2d``."""
    if x.ndim not in (3, 4):
        fail_shape("adaptive_avg_pool2d", "input (N, C, H, W) or (C, H, W)", tuple(x.shape))
    h, w = x.shape[-2:]
    oh, ow = (output_size, output_size) if isinstance(output_size, int) else output_size
    oh, ow = oh or h, ow or w
    if (oh, ow) == (h, w):  # each window is one pixel (a 1x1 map to (1, 1), VGG's 7x7 to 7x7)
        return core_functions.clone(x)
    if (oh, ow) == (1, 1):
        return core_functions.mean(x, (-2, -1), keepdim=True)
    if h % oh == 0 and w % ow == 0:
        blocks = core_functions.reshape(x, (*x.shape[:-2], oh, h // oh, ow, w // ow))
        return core_functions.mean(blocks, (-3, -1))
    return _resample(x, _adaptive_matrix(h, oh), _adaptive_matrix(w, ow))


def _adaptive_matrix(size: int, out: int) -> np.ndarray:
    m = np.zeros((out, size))
    for i in range(out):  # one row per output position (a handful), never per pixel
        start, end = (i * size) // out, -(-((i + 1) * size) // out)
        m[i, start:end] = 1.0 / (end - start)
    return m


def _resample(x, rows: np.ndarray, cols: np.ndarray):
    """``rows @ x @ cols.T`` over the last two dims (a separable linear resampling)."""
    r = from_array(rows, dtype=x.dtype, device=x.device)
    c = from_array(cols.T.copy(), dtype=x.dtype, device=x.device)
    return core_functions.matmul(r, core_functions.matmul(x, c))


def _nearest_matrix(size: int, out: int, scale: float) -> np.ndarray:
    src = np.minimum(np.floor(np.arange(out) * scale).astype(np.int64), size - 1)
    m = np.zeros((out, size))
    m[np.arange(out), src] = 1.0
    return m


def _linear_matrix(size: int, out: int, scale: float, align_corners: bool) -> np.ndarray:
    dst = np.arange(out, dtype=np.float64)
    if align_corners:
        src = dst * ((size - 1) / (out - 1) if out > 1 else 0.0)
    else:
        src = np.maximum((dst + 0.5) * scale - 0.5, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.int64), size - 1)
    i1 = np.minimum(i0 + 1, size - 1)
    lam = src - i0
    m = np.zeros((out, size))
    np.add.at(m, (np.arange(out), i0), 1.0 - lam)
    np.add.at(m, (np.arange(out), i1), lam)
    return m


def _nearest_exact_matrix(size: int, out: int, scale: float) -> np.ndarray:
    src = np.minimum(np.floor((np.arange(out) + 0.5) * scale).astype(np.int64), size - 1)
    m = np.zeros((out, size))
    m[np.arange(out), src] = 1.0
    return m


def _cubic_matrix(size: int, out: int, scale: float, align_corners: bool, a: float = -0.75) -> np.ndarray:
    """PyTorch's bicubic convolution (``A = -0.75``), taps clamped at the borders."""
    dst = np.arange(out, dtype=np.float64)
    if align_corners:
        src = dst * ((size - 1) / (out - 1) if out > 1 else 0.0)
    else:
        src = (dst + 0.5) * scale - 0.5
    base = np.floor(src).astype(np.int64)
    t = src - base
    weights = [((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a,
               ((a + 2) * t - (a + 3)) * t * t + 1,
               ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1,
               ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a]
    m = np.zeros((out, size))
    for k, w in enumerate(weights):
        np.add.at(m, (np.arange(out), np.clip(base - 1 + k, 0, size - 1)), w)
    return m


MODES = ("nearest", "nearest-exact", "linear", "bilinear", "bicubic", "area")


def _out_sizes(x, size, scale_factor) -> tuple[list, list]:
    in_sizes = list(x.shape[2:])
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate expected exactly one of size and scale_factor, "
                         f"got size={size}, scale_factor={scale_factor}")
    if size is not None:
        out = [size] * len(in_sizes) if isinstance(size, int) else list(size)
        return out, [i / o for i, o in zip(in_sizes, out)]
    factors = [scale_factor] * len(in_sizes) if isinstance(scale_factor, (int, float)) else list(scale_factor)
    return [int(math.floor(i * f)) for i, f in zip(in_sizes, factors)], [1.0 / f for f in factors]


def interpolate(x, size=None, scale_factor=None, mode: str = "nearest", align_corners=None):
    """Resize (N, C, H, W) or (N, C, L) inputs, as ``torch.nn.functional.interpolate``."""
    if x.ndim not in (3, 4):
        fail_shape("interpolate", "input (N, C, L) or (N, C, H, W)", tuple(x.shape))
    if mode not in MODES:
        raise ValueError(f"interpolate expected mode one of {', '.join(MODES)}, got {mode!r}")
    if mode in ("linear", "bilinear", "bicubic") and (x.ndim == 4) != (mode != "linear"):
        fail_shape("interpolate", f"a {'3' if mode == 'linear' else '4'}-d input for mode {mode!r}",
                   tuple(x.shape))
    if mode in ("nearest", "nearest-exact", "area") and align_corners is not None:
        raise ValueError("align_corners option can only be set with the interpolating modes: "
                         "linear | bilinear | bicubic | trilinear")
    out, scales = _out_sizes(x, size, scale_factor)
    if mode == "area":
        squeeze_area = x.ndim == 3
        y = adaptive_avg_pool2d(
            core_functions.unsqueeze(x, 2) if squeeze_area else x, ([1] if squeeze_area else []) + out
        )
        return core_functions.squeeze(y, 2) if squeeze_area else y
    squeeze = x.ndim == 3
    if squeeze:
        x, out, scales = core_functions.unsqueeze(x, 2), [1] + out, [1.0] + scales
    h, w = x.shape[2:]
    if mode == "nearest" and all(o % i == 0 and abs(s * (o // i) - 1) < 1e-12
                                 for o, i, s in zip(out, (h, w), scales)):
        fh, fw = out[0] // h, out[1] // w
        y = core_functions.expand(core_functions.reshape(x, (*x.shape[:2], h, 1, w, 1)), (*x.shape[:2], h, fh, w, fw))
        y = core_functions.reshape(y, (*x.shape[:2], out[0], out[1]))
    elif mode == "nearest":
        y = _resample(x, _nearest_matrix(h, out[0], scales[0]), _nearest_matrix(w, out[1], scales[1]))
    elif mode == "nearest-exact":
        y = _resample(x, _nearest_exact_matrix(h, out[0], scales[0]), _nearest_exact_matrix(w, out[1], scales[1]))
    elif mode == "bicubic":
        ac = bool(align_corners)
        y = _resample(x, _cubic_matrix(h, out[0], scales[0], ac), _cubic_matrix(w, out[1], scales[1], ac))
    else:
        ac = bool(align_corners)
        y = _resample(x, _linear_matrix(h, out[0], scales[0], ac), _linear_matrix(w, out[1], scales[1], ac))
    return core_functions.squeeze(y, 2) if squeeze else y
