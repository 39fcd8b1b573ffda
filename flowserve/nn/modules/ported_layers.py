"""More of ``torch.nn``'s layers, found missing by ``bench/api_coverage.py``: each a thin
module over a composite of ``flowserve.nn.functional_ported`` (PyTorch's constructor arguments,
parameter names and ``extra_repr``)."""

from __future__ import annotations

import math

from flowserve.nn import functional_ported as FP
from flowserve.nn import init
from flowserve.nn.module import Module
from flowserve.nn.modules.loss import _Loss
from flowserve.nn.modules.more_layers import _Pad2d
from flowserve.nn.parameter import Parameter
from flowserve.ops import creation


class _Unary(Module):
    """A layer that applies ``_fn(x, **self._args)``."""

    _fn = None

    def __init__(self, **args):
        super().__init__()
        self._args = args
        self.__dict__.update(args)

    def forward(self, x):
        return type(self)._fn(x, **self._args)

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self._args.items())


class Softshrink(_Unary):
    _fn = staticmethod(FP.softshrink)

    def __init__(self, lambd: float = 0.5):
        super().__init__(lambd=lambd)


class Hardshrink(_Unary):
    _fn = staticmethod(FP.hardshrink)

    def __init__(self, lambd: float = 0.5):
        super().__init__(lambd=lambd)


class Tanhshrink(_Unary):
    _fn = staticmethod(FP.tanhshrink)


class Softmin(_Unary):
    _fn = staticmethod(FP.softmin)

    def __init__(self, dim=None):
        super().__init__(dim=dim)


class ChannelShuffle(_Unary):
    _fn = staticmethod(FP.channel_shuffle)

    def __init__(self, groups: int):
        super().__init__(groups=groups)


class AvgPool1d(_Unary):
    _fn = staticmethod(FP.avg_pool1d)

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True):
        super().__init__(kernel_size=kernel_size, stride=stride, padding=padding, ceil_mode=ceil_mode,
                         count_include_pad=count_include_pad)


class AdaptiveAvgPool1d(_Unary):
    _fn = staticmethod(FP.adaptive_avg_pool1d)

    def __init__(self, output_size):
        super().__init__(output_size=output_size)


class LPPool1d(_Unary):
    _fn = staticmethod(FP.lp_pool1d)

    def __init__(self, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False):
        super().__init__(norm_type=norm_type, kernel_size=kernel_size, stride=stride, ceil_mode=ceil_mode)


class LPPool2d(LPPool1d):
    _fn = staticmethod(FP.lp_pool2d)


class RMSNorm(Module):
    """``x / sqrt(mean(x^2) + eps) * weight`` over ``normalized_shape`` (``torch.nn.RMSNorm``)."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine: bool = True, device=None, dtype=None):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.normalized_shape, self.eps, self.elementwise_affine = shape, eps, elementwise_affine
        self.weight = Parameter(creation.ones(*shape, device=device, dtype=dtype)) if elementwise_affine else None

    def forward(self, x):
        return FP.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class Bilinear(Module):
    """``y = x1^T W x2 + b`` (``torch.nn.Bilinear``: weight ``(out, in1, in2)``, PyTorch's init)."""

    def __init__(self, in1_features: int, in2_features: int, out_features: int, bias: bool = True,
                 device=None, dtype=None):
        super().__init__()
        self.in1_features, self.in2_features, self.out_features = in1_features, in2_features, out_features
        self.weight = Parameter(creation.empty(out_features, in1_features, in2_features, device=device, dtype=dtype))
        self.bias = Parameter(creation.empty(out_features, device=device, dtype=dtype)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1 / math.sqrt(self.weight.shape[1])
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1, input2):
        return FP.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")


class _Pad1d(_Pad2d):
    def __init__(self, padding, value: float = 0.0):
        super().__init__(tuple(padding) if isinstance(padding, (tuple, list)) else (int(padding),) * 2, value)


class ZeroPad1d(_Pad1d):
    def __init__(self, padding):
        super().__init__(padding, 0.0)


class ConstantPad1d(_Pad1d):
    pass


class ReflectionPad1d(_Pad1d):
    mode = "reflect"


class ReplicationPad1d(_Pad1d):
    mode = "replicate"


# -- losses ----------------------------------------------------------------------------------------

class MarginRankingLoss(_Loss):
    def __init__(self, margin: float = 0.0, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(reduction)
        self.margin = margin

    def forward(self, input1, input2, target):
        return FP.margin_ranking_loss(input1, input2, target, self.margin, reduction=self.reduction)


class HingeEmbeddingLoss(_Loss):
    def __init__(self, margin: float = 1.0, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(reduction)
        self.margin = margin

    def forward(self, input, target):  # noqa: A002
        return FP.hinge_embedding_loss(input, target, self.margin, reduction=self.reduction)


class SoftMarginLoss(_Loss):
    def forward(self, input, target):  # noqa: A002
        return FP.soft_margin_loss(input, target, reduction=self.reduction)


class CosineEmbeddingLoss(_Loss):
    def __init__(self, margin: float = 0.0, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(reduction)
        self.margin = margin

    def forward(self, input1, input2, target):
        return FP.cosine_embedding_loss(input1, input2, target, self.margin, reduction=self.reduction)


class TripletMarginLoss(_Loss):
    def __init__(self, margin: float = 1.0, p: float = 2.0, eps: float = 1e-6, swap: bool = False,
                 size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(reduction)
        self.margin, self.p, self.eps, self.swap = margin, p, eps, swap

    def forward(self, anchor, positive, negative):
        return FP.triplet_margin_loss(anchor, positive, negative, self.margin, self.p, self.eps, self.swap,
                                      reduction=self.reduction)


class PoissonNLLLoss(_Loss):
    def __init__(self, log_input: bool = True, full: bool = False, size_average=None, eps: float = 1e-8,
                 reduce=None, reduction: str = "mean"):
        super().__init__(reduction)
        self.log_input, self.full, self.eps = log_input, full, eps

    def forward(self, log_input, target):
        return FP.poisson_nll_loss(log_input, target, self.log_input, self.full, eps=self.eps,
                                   reduction=self.reduction)


class GaussianNLLLoss(_Loss):
    def __init__(self, *, full: bool = False, eps: float = 1e-6, reduction: str = "mean"):
        super().__init__(reduction)
        self.full, self.eps = full, eps

    def forward(self, input, target, var):  # noqa: A002
        return FP.gaussian_nll_loss(input, target, var, self.full, self.eps, self.reduction)


class MultiLabelSoftMarginLoss(_Loss):
    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(reduction)
        self.register_buffer("weight", weight)

    def forward(self, input, target):  # noqa: A002
        return FP.multilabel_soft_margin_loss(input, target, self.weight, reduction=self.reduction)
