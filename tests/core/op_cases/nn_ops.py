"""Cases for the nn primitives: convolutions, max pooling, batch and layer norm, dropout's mask."""

import numpy as np

from tests.core.op_cases import Case, integers


def _conv(x, w, stride, pads, dilation=None, groups=1, id=""):
    r = len(x) - 2
    attrs = {"stride": stride, "pads": pads, "dilation": dilation or [1] * r, "groups": groups}
    return Case([x, w], attrs, id=id)


def _conv_t(x, w, stride, pads, output_padding, dilation=None, groups=1, id=""):
    case = _conv(x, w, stride, pads, dilation, groups, id)
    case.attrs["output_padding"] = output_padding
    return case


def _distinct(shape):
    """A permutation of spread-out values: no ties for max pooling to break."""
    return lambda rng: rng.permutation(np.arange(np.prod(shape)) * 0.37 - 3.0).reshape(shape)


CASES = {
    "conv": [
        _conv((2, 3, 5, 5), (4, 3, 3, 3), [1, 1], [1, 1, 1, 1], id="3x3"),
        _conv((1, 4, 6, 7), (4, 2, 3, 2), [2, 3], [1, 0, 1, 0], [1, 2], groups=2, id="grouped-strided-dilated"),
        _conv((1, 3, 6, 6), (6, 1, 3, 3), [2, 2], [1, 1, 1, 1], groups=3, id="depthwise-multiplier"),
        _conv((1, 2, 5, 4), (3, 2, 2, 2), [1, 1], [0, 0, 1, 1], id="same-even-kernel"),
        _conv((2, 3, 5, 5), (4, 3, 1, 1), [2, 2], [0, 0, 0, 0], id="pointwise-strided"),
        _conv((2, 3, 9), (4, 3, 3), [2], [1, 1], [2], id="1d"),
        _conv((2, 3, 4, 5), (6, 3, 1, 1), [1, 1], [0, 0, 0, 0], id="pointwise"),
        _conv((2, 3, 7), (2, 3, 1), [1], [0, 0], id="pointwise-1d"),
        _conv((2, 4, 6, 6), (4, 1, 3, 3), [1, 1], [1, 1, 1, 1], groups=4, id="depthwise"),
        _conv((2, 3, 7, 6), (3, 1, 3, 2), [2, 1], [1, 0, 1, 1], [1, 2], groups=3, id="depthwise-strided-dilated"),
        _conv((2, 4, 1, 1), (4, 1, 3, 3), [1, 1], [1, 1, 1, 1], groups=4, id="depthwise-1x1-image"),
        _conv((1, 6, 7, 7), (3, 2, 5, 5), [1, 1], [0, 0, 1, 0], [1, 1], groups=3, id="grouped-small-output"),
        _conv((1, 6, 9, 9), (3, 2, 3, 3), [2, 2], [0, 0, 0, 0], [3, 3], groups=3, id="grouped-dilated-small-output"),
    ],
    "conv_transpose": [
        _conv_t((1, 3, 3, 4), (3, 2, 3, 3), [2, 2], [1, 1, 1, 1], [1, 0], id="strided"),
        _conv_t((1, 4, 3, 3), (4, 1, 3, 2), [2, 1], [0, 1, 0, 1], [0, 0], [1, 2], groups=2, id="grouped-dilated"),
        _conv_t((1, 2, 3, 3), (2, 1, 3, 3), [2, 2], [1, 1, 1, 1], [1, 1], groups=2, id="depthwise"),
        _conv_t((2, 3, 4), (3, 2, 3), [3], [1, 1], [2], id="1d"),
        _conv_t((2, 3, 4, 5), (3, 2, 3, 3), [1, 1], [1, 1, 1, 1], [0, 0], id="stride1-flipped-conv"),
        _conv_t((1, 4, 4, 4), (4, 3, 3, 2), [1, 1], [1, 0, 2, 1], [1, 0], [2, 1], groups=2,
                id="stride1-grouped-dilated-flipped-conv"),
        _conv_t((2, 3, 5, 5), (3, 1, 3, 3), [1, 1], [1, 1, 1, 1], [0, 0], groups=3, id="stride1-depthwise"),
        _conv_t((2, 3, 6), (3, 2, 3), [1], [0, 2], [0], id="stride1-1d"),
        _conv_t((2, 4, 3, 3), (4, 5, 1, 1), [1, 1], [0, 0, 0, 0], [0, 0], id="pointwise-matmul"),
    ],
    "max_pool2d": [
        Case([_distinct((2, 2, 5, 6))], {"kernel": [3, 3], "stride": [2, 2], "pads": [1, 1], "dilation": [1, 1],
                                          "ceil_mode": False}, id="3x3-s2-p1"),
        Case([_distinct((1, 2, 6, 7))], {"kernel": [2, 3], "stride": [2, 2], "pads": [0, 1], "dilation": [1, 1],
                                          "ceil_mode": True}, id="ceil"),
        Case([_distinct((1, 1, 7, 7))], {"kernel": [2, 2], "stride": [1, 2], "pads": [0, 0], "dilation": [2, 2],
                                          "ceil_mode": False}, id="dilated"),
    ],
    "max_pool2d_indices": [
        Case([_distinct((1, 2, 5, 6))], {"kernel": [3, 3], "stride": [2, 2], "pads": [1, 1], "dilation": [1, 1],
                                          "ceil_mode": False}, id="3x3-s2-p1"),
        Case([_distinct((2, 1, 6, 7))], {"kernel": [2, 3], "stride": [2, 1], "pads": [1, 1], "dilation": [2, 1],
                                          "ceil_mode": True}, id="ceil-dilated"),
    ],
    "max_pool2d_backward": [
        Case([(1, 2, 2, 3), integers((1, 2, 2, 3), 0, 2 * 4 * 5)], {"shape": [1, 2, 4, 5]}, id="repeats-add"),
    ],
    "batch_norm_train": [
        Case([(4, 3, 2, 3), (3,), (3,)], {"eps": 1e-5}, id="2d"),
        Case([(5, 2), (2,), (2,)], {"eps": 1e-3}, id="1d-features"),
        Case([(3, 2, 4), (2,), (2,)], {"eps": 0.1}, id="sequence"),
    ],
    "layer_norm_stats": [
        Case([(4, 3, 5), (5,), (5,)], {"eps": 1e-5, "dims": 1}, id="last-dim"),
        Case([(2, 3, 4), (3, 4), (3, 4)], {"eps": 1e-3, "dims": 2}, id="two-dims"),
        Case([(6,), (6,), (6,)], {"eps": 0.1, "dims": 1}, id="no-leading-dims"),
    ],
    # random draws are only comparable where they are certain: an empty range, a vanishing deviation
    "uniform_like": [Case([(3, 4)], {"low": 0.5, "high": 0.5}, id="point")],
    "normal_like": [Case([(2, 5)], {"mean": -1.5, "std": 1e-30}, id="point")],
    # a pure function of (seed, stream, index): ONNX Runtime's integer hash equals the kernel
    "uniform_seeded": [
        Case([(3, 4), integers((), 0, 2**31 - 1)], {"stream": 1}, grad=False, id="f32"),
        Case([(2, 3, 5), integers((), 0, 2**31 - 1)], {"stream": 9}, grad=False, id="3d"),
    ],
    "dropout_mask": [
        Case([(3, 4)], {"p": 0.0}, id="keep-all"),
        Case([(2, 5)], {"p": 1.0}, id="drop-all"),
    ],
}
