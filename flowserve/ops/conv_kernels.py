"""numpy/CuPy kernels of the convolution primitives (2-D; ``flowserve.ops.conv`` runs 1-D
inputs as height-1 images).

Dense and grouped convolutions use channels-last im2col (the copy reads contiguous runs of
channels) and one matrix product (batched over groups); a dense convolution whose input has
the batch as its most contiguous axis (a weight gradient) runs its im2col along the batch
instead; transposed convolutions one product
and a strided add per kernel tap (col2im, channels last); depthwise convolutions one
multiply-add per kernel tap. 1x1 convolutions are a product per sample. Stride-1 transposed
convolutions (input gradients) run as convolutions with the flipped kernel (im2col and one
product instead of a product per input pixel and a strided add per kernel tap). The im2col
columns are copied into a per-thread buffer that is reused from call to call (``_Scratch``).
"""

from __future__ import annotations

import contextvars
import math
import threading


class _Scratch:
    """A thread's reusable im2col buffers (one per array module and dtype, grown to the
    largest columns seen). Fresh 100 MB arrays cost more in first-touch page faults than
    the copy that fills them; the columns never leave the kernel (the products write fresh
    outputs), so one buffer serves every call of the thread that owns it."""

    def __init__(self):
        self.thread = threading.get_ident()
        self.buffers = {}

    def filled(self, xp, view):
        """A copy of ``view`` (same shape) in this thread's buffer; valid until the next call."""
        size, key = math.prod(view.shape), (xp.__name__, view.dtype.str)
        buffer = self.buffers.get(key)
        if buffer is None or buffer.size < size:
            buffer = self.buffers[key] = xp.empty(size, dtype=view.dtype)
        out = buffer[:size].reshape(view.shape)
        xp.copyto(out, view)
        return out


_SCRATCH: contextvars.ContextVar = contextvars.ContextVar("flowserve_conv_scratch", default=None)


def _scratch() -> _Scratch:
    """The calling thread's scratch (a context copied into another thread gets a new one)."""
    scratch = _SCRATCH.get()
    if scratch is None or scratch.thread != threading.get_ident():
        scratch = _Scratch()
        _SCRATCH.set(scratch)
    return scratch


def conv_out_size(size: int, k: int, s: int, pb: int, pe: int, d: int) -> int:
    """A convolution's output length along one axis."""
    return (size + pb + pe - d * (k - 1) - 1) // s + 1


def conv_transpose_out_size(size: int, k: int, s: int, pb: int, pe: int, d: int, op: int) -> int:
    """A transposed convolution's output length along one axis."""
    return (size - 1) * s - pb - pe + d * (k - 1) + op + 1


def _zero_padded(xp, x, pads):
    """``x`` (N, C, H, W) with ``pads`` ([top, left, bottom, right]) zeros around (one copy)."""
    n, c, h, w = x.shape
    out = xp.zeros((n, c, h + pads[0] + pads[2], w + pads[1] + pads[3]), dtype=x.dtype)
    out[:, :, pads[0]:pads[0] + h, pads[1]:pads[1] + w] = x
    return out


def windows(xp, x, kernel, stride, pads, dilation):
    """(N, C, Ho, Wo, kh, kw) view of the zero-padded input: window (i, j) of each output."""
    if any(pads):
        x = _zero_padded(xp, x, pads)
    span = [(k - 1) * d + 1 for k, d in zip(kernel, dilation)]
    out = [(x.shape[2 + i] - span[i]) // stride[i] + 1 for i in range(2)]
    view = xp.lib.stride_tricks.sliding_window_view(x, span, axis=(2, 3))
    return view[:, :, :(out[0] - 1) * stride[0] + 1:stride[0], :(out[1] - 1) * stride[1] + 1:stride[1],
                ::dilation[0], ::dilation[1]]


def _padded_channels_last(xp, x, pads):
    """``x`` (N, C, H, W) as (N, H, W, C) with ``pads`` ([top, left, bottom, right]) zeros
    around (one copy)."""
    n, c, h, w = x.shape
    xt = xp.zeros((n, h + pads[0] + pads[2], w + pads[1] + pads[3], c), dtype=x.dtype)
    xt[:, pads[0]:pads[0] + h, pads[1]:pads[1] + w] = x.transpose(0, 2, 3, 1)
    return xt


def _columns(xp, x, kernel, stride, pads, dilation):
    """(N, Ho, Wo, kh, kw, C) view of the zero-padded input in channels-last layout, so that
    flattening it to im2col columns copies contiguous runs of channels."""
    xt = _padded_channels_last(xp, x, pads)
    span = [(k - 1) * d + 1 for k, d in zip(kernel, dilation)]
    out = [(xt.shape[1 + i] - span[i]) // stride[i] + 1 for i in range(2)]
    view = xp.lib.stride_tricks.sliding_window_view(xt, span, axis=(1, 2))
    view = view[:, :(out[0] - 1) * stride[0] + 1:stride[0], :(out[1] - 1) * stride[1] + 1:stride[1], :,
                ::dilation[0], ::dilation[1]]
    return view.transpose(0, 1, 2, 4, 5, 3)


CHANNELS_LAST_BELOW = 256  # output pixels under which a depthwise conv runs channels-last


def _depthwise(xp, x, w, stride, pads, dilation):
    """Each output channel sees one input channel: one multiply-add per kernel tap."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    m = o // c
    ho, wo = (conv_out_size(size, k, s, pb, pe, d) for size, k, s, pb, pe, d in
              zip((h, wd), (kh, kw), stride, pads[:2], pads[2:], dilation))
    if m == 1 and ho * wo < CHANNELS_LAST_BELOW:
        return _depthwise_channels_last(xp, x, w.reshape(c, kh, kw), (ho, wo), stride, pads,
                                        dilation)
    win = windows(xp, x, (kh, kw), stride, pads, dilation)
    taps = w.reshape(c, m, kh, kw)
    out = xp.zeros((n, c, m, ho, wo), dtype=x.dtype)
    for i in range(kh):
        for j in range(kw):
            out += win[:, :, None, :, :, i, j] * taps[None, :, :, i, j, None, None]
    return out.reshape(n, o, ho, wo)


def _depthwise_channels_last(xp, x, taps, out_size, stride, pads, dilation):
    """A depthwise conv on small maps: over an (N, H, W, C) copy each tap's multiply-add runs
    along contiguous channels (over NCHW, rows of a few pixels made numpy's inner loops short:
    4x4 maps 2.3x, 2x2 maps 4.5x faster; from 16x16 up the two layouts cost the same)."""
    n, c = x.shape[:2]
    _, kh, kw = taps.shape
    xt = _padded_channels_last(xp, x, pads)
    (ho, wo), (sh, sw) = out_size, stride
    out = xp.empty((n, ho, wo, c), dtype=x.dtype)
    product = xp.empty_like(out)
    for i in range(kh):
        for j in range(kw):
            top, left = i * dilation[0], j * dilation[1]
            tap = xt[:, top:top + (ho - 1) * sh + 1:sh, left:left + (wo - 1) * sw + 1:sw]
            xp.multiply(tap, taps[:, i, j], out=out if i == j == 0 else product)
            if i or j:
                out += product
    return xp.ascontiguousarray(out.transpose(0, 3, 1, 2))


TAPS_FROM_KERNEL_PIXELS = 64  # kernels this large with few outputs: one einsum per output


def _few_outputs(xp, x, w, stride, pads, dilation, groups, out_size):
    """A grouped conv of one sample with one output channel per group, a large kernel and
    few output pixels: a depthwise conv's weight gradient (the input's channels as groups,
    the output gradient as kernel, kh x kw outputs). One sum of products per output pixel
    over its window, instead of im2col columns as many times the input as there are
    outputs (16x16 and 32x32 maps: 2.5-3x faster; below 8x8 kernels im2col wins)."""
    o, cg, kh, kw = w.shape
    padded = _zero_padded(xp, x, pads) if any(pads) else x
    per_group = padded.reshape(groups, cg, *padded.shape[2:])
    out = xp.empty((1, o, *out_size), dtype=x.dtype)
    for i in range(out_size[0]):
        for j in range(out_size[1]):
            top, left = i * stride[0], j * stride[1]
            window = per_group[:, :, top:top + (kh - 1) * dilation[0] + 1:dilation[0],
                               left:left + (kw - 1) * dilation[1] + 1:dilation[1]]
            out[0, :, i, j] = xp.einsum("gcab,gcab->g", window, w)
    return out


def _batch_inner(xp, x, w, stride, pads, dilation, out_size):
    """A dense conv whose input has the batch as its most contiguous axis, as a weight
    gradient's does (``ops.conv.weight_grad``: the input's channels as batch, the output
    gradient as kernel). The same product with the roles of the kernel's and the output's
    positions swapped: im2col over the input seen as (C, B, H, W), so that its copies read
    runs along the batch axis, and kernel rows in the layout the output gradient already has.
    The columns and the product are the same size as the usual im2col's (ResNet-18 weight
    gradients: 32x32 maps 68 -> 35 ms, 8x8 23 -> 16 ms)."""
    n = x.shape[0]
    o, c, kh, kw = w.shape
    ho, wo = out_size
    cols = _columns(xp, x.transpose(1, 0, 2, 3), (ho, wo), dilation, pads, stride)[:, :kh, :kw]
    cols = _scratch().filled(xp, cols).reshape(c * kh * kw, ho * wo * n)
    out = cols.T @ w.transpose(1, 2, 3, 0).reshape(c * kh * kw, o)
    return out.reshape(ho, wo, n, o).transpose(2, 3, 0, 1)


def conv2d(xp, x, w, stride, pads, dilation, groups):
    n, c = x.shape[:2]
    o, cg, kh, kw = w.shape
    out_size = [conv_out_size(size, k, s, pb, pe, d) for size, k, s, pb, pe, d in
                zip(x.shape[2:], (kh, kw), stride, pads[:2], pads[2:], dilation)]
    if n == 1 and o == groups > 1 and kh * kw >= TAPS_FROM_KERNEL_PIXELS \
            and out_size[0] * out_size[1] <= kh * kw:
        return _few_outputs(xp, x, w, stride, pads, dilation, groups, out_size)
    if kh == kw == 1 and groups == 1 and not any(pads):  # pointwise: one product per sample
        xs = x[:, :, ::stride[0], ::stride[1]]
        ho, wo = xs.shape[2:]
        return (w.reshape(o, c) @ xs.reshape(n, c, ho * wo)).reshape(n, o, ho, wo)
    if cg == 1:
        return _depthwise(xp, x, w, stride, pads, dilation)
    if groups == 1 and n > 1 and c > 1 and x.strides[0] < x.strides[1]:
        return _batch_inner(xp, x, w, stride, pads, dilation, out_size)
    cols = _columns(xp, x, (kh, kw), stride, pads, dilation)
    ho, wo = cols.shape[1:3]
    if groups == 1:
        cols = _scratch().filled(xp, cols).reshape(n * ho * wo, kh * kw * c)
        out = cols @ w.transpose(2, 3, 1, 0).reshape(kh * kw * c, o)
        return out.reshape(n, ho, wo, o).transpose(0, 3, 1, 2)
    og = o // groups
    cols = cols.reshape(n, ho, wo, kh, kw, groups, cg).transpose(5, 0, 1, 2, 3, 4, 6)
    cols = _scratch().filled(xp, cols).reshape(groups, n * ho * wo, kh * kw * cg)
    wg = w.reshape(groups, og, cg, kh, kw).transpose(0, 3, 4, 2, 1).reshape(groups, kh * kw * cg, og)
    out = (cols @ wg).reshape(groups, n, ho, wo, og)
    return out.transpose(1, 0, 4, 2, 3).reshape(n, o, ho, wo)


def _transpose_columns(xp, x, w, groups):
    """Per input pixel (channels last), its contribution to each kernel tap and output channel:
    (N, H, W, kh, kw, O) = sum over the group's input channels of x * w."""
    n, cin, h, wd = x.shape
    _, og, kh, kw = w.shape
    cg = cin // groups
    rows = x.transpose(0, 2, 3, 1).reshape(n * h * wd, cin)
    if groups == 1:
        cols = rows @ w.transpose(0, 2, 3, 1).reshape(cin, kh * kw * og)
        return cols.reshape(n, h, wd, kh, kw, og)
    rows = rows.reshape(n * h * wd, groups, cg).transpose(1, 0, 2)
    cols = rows @ w.reshape(groups, cg, og, kh, kw).transpose(0, 1, 3, 4, 2).reshape(groups, cg, kh * kw * og)
    cols = cols.reshape(groups, n, h, wd, kh, kw, og).transpose(1, 2, 3, 4, 5, 0, 6)
    return cols.reshape(n, h, wd, kh, kw, groups * og)


def _transpose_as_conv(xp, x, w, pads, dilation, groups, output_padding):
    """A stride-1 transposed convolution is a convolution with the flipped kernel, its input
    and output channels swapped per group, and the complementary padding."""
    cin, og, kh, kw = w.shape
    cg = cin // groups
    flipped = w[:, :, ::-1, ::-1].reshape(groups, cg, og, kh, kw).transpose(0, 2, 1, 3, 4)
    flipped = xp.ascontiguousarray(flipped).reshape(groups * og, cg, kh, kw)
    span = [dilation[0] * (kh - 1), dilation[1] * (kw - 1)]
    conv_pads = [span[0] - pads[0], span[1] - pads[1], span[0] - pads[2] + output_padding[0],
                 span[1] - pads[3] + output_padding[1]]
    return conv2d(xp, x, flipped, [1, 1], conv_pads, dilation, groups)


def conv_transpose2d(xp, x, w, stride, pads, dilation, groups, output_padding):
    n, cin, h, wd = x.shape
    _, og, kh, kw = w.shape
    if tuple(stride) == (1, 1) and pads[0] <= dilation[0] * (kh - 1) and pads[2] <= dilation[0] * (kh - 1) \
            and pads[1] <= dilation[1] * (kw - 1) and pads[3] <= dilation[1] * (kw - 1):
        return _transpose_as_conv(xp, x, w, pads, dilation, groups, output_padding)
    o, cg = og * groups, cin // groups
    out_hw = [conv_transpose_out_size(x.shape[2 + i], w.shape[2 + i], stride[i], pads[i], pads[2 + i],
                                      dilation[i], output_padding[i]) for i in range(2)]
    full = [max((x.shape[2 + i] - 1) * stride[i] + dilation[i] * (w.shape[2 + i] - 1) + 1,
                pads[i] + out_hw[i]) for i in range(2)]
    acc = xp.zeros((n, full[0], full[1], o), dtype=x.dtype)  # channels last: contiguous adds
    cols = None if cg == 1 else _transpose_columns(xp, x, w, groups)
    xt = x.transpose(0, 2, 3, 1)[..., None] if cg == 1 else None
    taps = w.reshape(groups, og, kh, kw) if cg == 1 else None
    for i in range(kh):
        for j in range(kw):
            if cols is None:  # depthwise: each output channel sees one input channel
                part = (xt * taps[:, :, i, j]).reshape(n, h, wd, o)
            else:
                part = cols[:, :, :, i, j]
            r0, c0 = i * dilation[0], j * dilation[1]
            acc[:, r0:r0 + (h - 1) * stride[0] + 1:stride[0], c0:c0 + (wd - 1) * stride[1] + 1:stride[1]] += part
    return acc[:, pads[0]:pads[0] + out_hw[0], pads[1]:pads[1] + out_hw[1]].transpose(0, 3, 1, 2)
