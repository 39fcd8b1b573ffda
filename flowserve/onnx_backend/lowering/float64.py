"""float64 lowerings of the primitives ONNX Runtime has no double kernels for.

ONNX Runtime 1.31's CPU provider runs ``Conv``, ``ConvTranspose``, ``Erf``, ``LSTM``,
``GRU`` and ``RNN`` in float32 only (``NOT_IMPLEMENTED``, or "does not support double").
A ``.double()`` model keeps its precision instead: these lowerings compute the same
functions in float64 with operators that do have double kernels (``MatMul``, ``Slice``,
``Pad``, elementwise math). Casting to float32 would run, and silently lose precision.

- convolution: the kernel taps as strided ``Slice``s of the padded input, stacked, and one
  batched ``MatMul`` with the weight per group (im2col);
- transposed convolution: the input spread by its stride (zeros between elements), then
  the convolution above with the kernel flipped and its channels swapped per group;
- ``erf``: Cephes' rational approximations (S. L. Moshier, ``ndtr.c``; the ones SciPy's
  ``erf`` uses), relative error about 1e-16;
- recurrent layers: unrolled over the (traced, fixed) sequence length, one ``MatMul`` of
  the state per step, PyTorch's gate formulas.
"""

from __future__ import annotations

import itertools

import numpy as np

F64 = np.float64


def is_double(ctx, name: str) -> bool:
    return ctx.meta(name).dtype == "float64"


# -- convolution ---------------------------------------------------------------------------


def emit_conv_f64(b, ctx, x: str, w: str, w_shape, y: str, attrs: dict) -> None:
    """``y = Conv(x, w)`` (ONNX ``attrs``; pads may be negative: a crop) as im2col + MatMul."""
    out = [int(d) for d in ctx.meta(y).shape[2:]]
    o, c_g, *kernel = (int(d) for d in w_shape)
    r, groups = len(kernel), int(attrs["group"])
    pads = [int(p) for p in attrs["pads"]]
    if any(pads):  # ONNX Pad: negative pads remove elements
        x = b.op1("Pad", [x, b.const([0, 0, *pads[:r], 0, 0, *pads[r:]])])
    stride, dilation = attrs["strides"], attrs["dilations"]
    taps = []
    for tap in itertools.product(*(range(k) for k in kernel)):
        starts = [t * d for t, d in zip(tap, dilation)]
        ends = [s + st * (n - 1) + 1 for s, st, n in zip(starts, stride, out)]
        piece = b.op1("Slice", [x, b.const(starts), b.const(ends), b.const(list(range(2, 2 + r))),
                                b.const(list(stride))])
        taps.append(b.op1("Unsqueeze", [piece, b.const([2])]))
    patches = taps[0] if len(taps) == 1 else b.op1("Concat", taps, axis=2)  # (N, C, K, *out)
    k, length = len(taps), int(np.prod(out))
    patches = b.op1("Reshape", [patches, b.const([0, groups, c_g * k, length])])
    matrix = b.op1("Reshape", [w, b.const([groups, o // groups, c_g * k])])
    product = b.op1("MatMul", [matrix, patches])  # (N, groups, O / groups, L)
    b.op("Reshape", [product, b.const([0, o, *out])], [y])


def _spread(b, ctx, x: str, stride: list) -> str:
    """``x`` with ``stride - 1`` zeros after every element of each spatial axis (the last
    element's trailing zeros included: the caller's pads crop them)."""
    if all(s == 1 for s in stride):
        return x
    n_c, spatial = ctx.meta(x).shape[1], [int(d) for d in ctx.meta(x).shape[2:]]
    r = len(spatial)
    split = [0, int(n_c)] + [v for d in spatial for v in (d, 1)]
    x = b.op1("Reshape", [x, b.const(split)])
    ends = [0] * (2 + 2 * r)
    for i, s in enumerate(stride):
        ends[3 + 2 * i] = int(s) - 1
    x = b.op1("Pad", [x, b.const([0] * (2 + 2 * r) + ends)])
    return b.op1("Reshape", [x, b.const([0, int(n_c)] + [d * int(s) for d, s in zip(spatial, stride)])])


def emit_conv_transpose_f64(b, ctx, node, flipped_kernel) -> None:
    """``conv_transpose`` as a stride-1 convolution of the spread input with the flipped
    kernel (``flipped_kernel(b, w, shape, groups)``, the Conv weight)."""
    a = node.attrs
    x, w = node.inputs[0], node.inputs[1]
    shape = [int(d) for d in ctx.meta(w).shape]
    kernel, r, groups = shape[2:], len(shape) - 2, int(a["groups"])
    stride = [int(s) for s in a["stride"]]
    reach = [int(d) * (k - 1) for d, k in zip(a["dilation"], kernel)]
    begin = [reach[i] - int(a["pads"][i]) for i in range(r)]
    end = [reach[i] - int(a["pads"][r + i]) + int(a["output_padding"][i]) - (stride[i] - 1) for i in range(r)]
    conv_shape = [shape[1] * groups, shape[0] // groups, *kernel]
    attrs = dict(strides=[1] * r, pads=begin + end, dilations=list(a["dilation"]), group=groups)
    emit_conv_f64(b, ctx, _spread(b, ctx, x, stride), flipped_kernel(b, w, shape, groups), conv_shape,
                  node.outputs[0], attrs)


# -- erf (Cephes ndtr.c) --------------------------------------------------------------------

_ERF_T = (9.60497373987051638749e0, 9.00260197203842689217e1, 2.23200534594684319226e3,
          7.00332514112805075473e3, 5.55923013010394962768e4)
_ERF_U = (1.0, 3.35617141647503099647e1, 5.21357949780152679795e2, 4.59432382970980127987e3,
          2.26290000613890934246e4, 4.92673942608635921086e4)
_ERFC_P = (2.46196981473530512524e-10, 5.64189564831068821977e-1, 7.46321056442269912687e0,
           4.86371970985681366614e1, 1.96520832956077098242e2, 5.26445194995477358631e2,
           9.34528527171957607540e2, 1.02755188689515710272e3, 5.57535335369399327526e2)
_ERFC_Q = (1.0, 1.32281951154744992508e1, 8.67072140885989742329e1, 3.54937778887819891062e2,
           9.75708501743205489753e2, 1.82390916687909736289e3, 2.24633760818710981792e3,
           1.65666309194161350182e3, 5.57535340817727675546e2)
_ERFC_R = (5.64189583547755073984e-1, 1.27536670759978104416e0, 5.01905042251180477414e0,
           6.16021097993053585195e0, 7.40974269950448939160e0, 2.97886665372100240670e0)
_ERFC_S = (1.0, 2.26052863220117276590e0, 9.39603524938001434673e0, 1.20489539808096656605e1,
           1.70814450747565897222e1, 9.60896809063285878198e0, 3.36907645100081516050e0)


def _poly(b, x: str, coefficients: list) -> str:
    """Horner's rule, highest power first."""
    acc = b.const(coefficients[0], F64)
    for c in coefficients[1:]:
        acc = b.op1("Add", [b.op1("Mul", [acc, x]), b.const(c, F64)])
    return acc


def _ratio(b, x: str, num: tuple, den: tuple) -> str:
    return b.op1("Div", [_poly(b, x, num), _poly(b, x, den)])


def emit_erf_f64(b, x: str, y: str) -> None:
    """``erf(x) = x T(x²)/U(x²)`` for ``|x| <= 1``, else ``sign(x) (1 - erfc(|x|))`` with
    ``erfc(a) = exp(-a²) P(a)/Q(a)`` below 8 and ``exp(-a²) R(a)/S(a)`` from 8 on."""
    a = b.op1("Abs", [x])
    square = b.op1("Mul", [x, x])
    small = b.op1("Mul", [x, _ratio(b, square, _ERF_T, _ERF_U)])
    tail = b.op1("Min", [a, b.const(30.0, F64)])  # erfc(30) is 0 in float64; inf would give inf/inf
    decay = b.op1("Exp", [b.op1("Neg", [b.op1("Mul", [tail, tail])])])
    near = _ratio(b, tail, _ERFC_P, _ERFC_Q)
    far = _ratio(b, tail, _ERFC_R, _ERFC_S)
    erfc = b.op1("Mul", [decay, b.op1("Where", [b.op1("Less", [tail, b.const(8.0, F64)]), near, far])])
    large = b.op1("Mul", [b.op1("Sign", [x]), b.op1("Sub", [b.const(1.0, F64), erfc])])
    b.op("Where", [b.op1("LessOrEqual", [a, b.const(1.0, F64)]), small, large], [y])


# -- recurrent layers ------------------------------------------------------------------------


def _cell(b, op: str, gates_x: str, h: str, c, w_hh_t: str, b_hh: str, nonlinearity: str):
    """One time step: the new (h, c) from the input's gate pre-activations ``gates_x``."""
    gates_h = b.op1("Add", [b.op1("MatMul", [h, w_hh_t]), b_hh])
    if op == "rnn_layer":
        act = "Tanh" if nonlinearity == "tanh" else "Relu"
        return b.op1(act, [b.op1("Add", [gates_x, gates_h])]), None
    if op == "lstm_layer":
        i, f, g, o = b.op("Split", [b.op1("Add", [gates_x, gates_h])], n_out=4, axis=-1, num_outputs=4)
        c = b.op1("Add", [b.op1("Mul", [b.op1("Sigmoid", [f]), c]),
                          b.op1("Mul", [b.op1("Sigmoid", [i]), b.op1("Tanh", [g])])])
        return b.op1("Mul", [b.op1("Sigmoid", [o]), b.op1("Tanh", [c])]), c
    xr, xz, xn = b.op("Split", [gates_x], n_out=3, axis=-1, num_outputs=3)
    hr, hz, hn = b.op("Split", [gates_h], n_out=3, axis=-1, num_outputs=3)
    r = b.op1("Sigmoid", [b.op1("Add", [xr, hr])])
    z = b.op1("Sigmoid", [b.op1("Add", [xz, hz])])
    n = b.op1("Tanh", [b.op1("Add", [xn, b.op1("Mul", [r, hn])])])
    return b.op1("Add", [n, b.op1("Mul", [z, b.op1("Sub", [h, n])])]), None  # (1 - z) n + z h


def emit_recurrent_f64(b, node, ctx) -> None:
    """A recurrent layer unrolled over its traced sequence length."""
    states = 2 if node.op == "lstm_layer" else 1
    x, h = node.inputs[0], node.inputs[1]
    c = node.inputs[2] if states == 2 else None
    w_ih, w_hh, b_ih, b_hh = node.inputs[1 + states:5 + states]
    length = int(ctx.meta(x).shape[0])
    pre = b.op1("Add", [b.op1("MatMul", [x, b.op1("Transpose", [w_ih], perm=[1, 0])]), b_ih])  # (T, B, G*H)
    steps = [pre] if length == 1 else b.op("Split", [pre], n_out=length, axis=0, num_outputs=length)
    w_hh_t = b.op1("Transpose", [w_hh], perm=[1, 0])
    ys = [None] * length
    order = range(length - 1, -1, -1) if node.attrs.get("reverse") else range(length)
    for t in order:
        gates_x = b.op1("Squeeze", [steps[t], b.const([0])])
        h, c = _cell(b, node.op, gates_x, h, c, w_hh_t, b_hh, node.attrs.get("nonlinearity", "tanh"))
        ys[t] = b.op1("Unsqueeze", [h, b.const([0])])
    b.op("Concat", ys, [node.outputs[0]], axis=0)
    b.op("Identity", [h], [node.outputs[1]])
    if states == 2:
        b.op("Identity", [c], [node.outputs[2]])
