"""More of ``torch.nn``'s layers, each a thin module over a functional composite:
channel dropout, instance norm, adaptive max pooling, pixel (un)shuffle, im2col, padding,
distances and a few activations; PyTorch's constructor arguments and parameter names."""

from __future__ import annotations

from flowserve.nn import functional as nn_functional
from flowserve.nn import functional_3d as F3
from flowserve.nn import functional_more as FX
from flowserve.nn.module import Module
from flowserve.nn.modules.dropout import Dropout
from flowserve.nn.modules.normalization import BatchNorm2d
from flowserve.nn.parameter import Parameter
from flowserve.ops import creation
from flowserve.ops import functional as ops_functional
from flowserve.ops.autocast_policy import lower_precision
from flowserve.ops.padding import pad
from flowserve.ops.registry import fail_shape


class _ChannelDropout(Dropout):
    """Dropout of whole channels: ``Dropout``'s arguments, one draw per (sample, channel)."""

    _fn = None

    def forward(self, x):
        return type(self)._fn(x, self.p, self.training, self.inplace)


class Dropout1d(_ChannelDropout):
    """Zero whole channels of ``(N, C, L)`` with probability ``p`` (training only)."""

    _fn = staticmethod(FX.dropout1d)


class Dropout2d(_ChannelDropout):
    """Zero whole channels of ``(N, C, H, W)`` with probability ``p`` (training only)."""

    _fn = staticmethod(FX.dropout2d)


class Dropout3d(_ChannelDropout):
    _fn = staticmethod(FX.dropout3d)


class _InstanceNorm(Module):
    _spatial = 2

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1, affine: bool = False,
                 track_running_stats: bool = False, device=None, dtype=None):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        kw = dict(device=device, dtype=dtype)
        self.weight = Parameter(creation.ones(num_features, **kw)) if affine else None
        self.bias = Parameter(creation.zeros(num_features, **kw)) if affine else None
        if track_running_stats:
            self.register_buffer("running_mean", creation.zeros(num_features, **kw))
            self.register_buffer("running_var", creation.ones(num_features, **kw))
            self.register_buffer("num_batches_tracked", creation.zeros((), dtype="int64", device=device))
        else:
            self.running_mean = self.running_var = self.num_batches_tracked = None

    def forward(self, x):
        if x.ndim not in (self._spatial + 1, self._spatial + 2):
            fail_shape(type(self).__name__, f"a {self._spatial + 1}-d or {self._spatial + 2}-d input",
                       tuple(x.shape))
        unbatched = x.ndim == self._spatial + 1
        x = ops_functional.unsqueeze(x, 0) if unbatched else x
        use_running = self.track_running_stats and not self.training
        if self.track_running_stats and self.training:
            self._update_running_stats(x)
        out = FX.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                               not use_running, self.momentum, self.eps)
        return ops_functional.squeeze(out, 0) if unbatched else out

    def _update_running_stats(self, x) -> None:
        """PyTorch's rule: the per-instance statistics (unbiased variance), averaged over the batch."""
        axes = tuple(range(2, x.ndim))
        count = x.numel() // (x.shape[0] * x.shape[1])
        with_grad_off = x.detach()
        mean = ops_functional.mean(with_grad_off, dim=axes)
        var = ops_functional.mean((with_grad_off - ops_functional.reshape(mean, tuple(mean.shape) + (1,) * len(axes))) ** 2, dim=axes)
        var = var * (count / max(count - 1, 1))
        m = self.momentum  # (PyTorch's instance norm leaves num_batches_tracked at 0)
        self.running_mean.copy_(self.running_mean * (1 - m) + ops_functional.mean(mean, dim=0) * m)
        self.running_var.copy_(self.running_var * (1 - m) + ops_functional.mean(var, dim=0) * m)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"track_running_stats={self.track_running_stats}")


class InstanceNorm1d(_InstanceNorm):
    _spatial = 1


class InstanceNorm2d(_InstanceNorm):
    _spatial = 2


class InstanceNorm3d(_InstanceNorm):
    _spatial = 3


class AdaptiveMaxPool2d(Module):
    def __init__(self, output_size, return_indices: bool = False):
        super().__init__()
        self.output_size, self.return_indices = output_size, return_indices

    def forward(self, x):
        return FX.adaptive_max_pool2d(x, self.output_size, self.return_indices)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveMaxPool1d(AdaptiveMaxPool2d):
    def forward(self, x):
        return FX.adaptive_max_pool1d(x, self.output_size, self.return_indices)


class PixelShuffle(Module):
    def __init__(self, upscale_factor: int):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, x):
        return FX.pixel_shuffle(x, self.upscale_factor)


class PixelUnshuffle(Module):
    def __init__(self, downscale_factor: int):
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, x):
        return FX.pixel_unshuffle(x, self.downscale_factor)


class Unfold(Module):
    def __init__(self, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.kernel_size, self.dilation, self.padding, self.stride = kernel_size, dilation, padding, stride

    def forward(self, x):
        return FX.unfold(x, self.kernel_size, self.dilation, self.padding, self.stride)


class Fold(Module):
    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, x):
        return FX.fold(x, self.output_size, self.kernel_size, self.dilation, self.padding, self.stride)


class _Pad2d(Module):
    mode = "constant"

    def __init__(self, padding, value: float = 0.0):
        super().__init__()
        self.padding = tuple(padding) if isinstance(padding, (tuple, list)) else (int(padding),) * 4
        self.value = value

    def forward(self, x):
        return pad(x, list(self.padding), mode=self.mode, value=self.value)


class ZeroPad2d(_Pad2d):
    def __init__(self, padding):
        super().__init__(padding, 0.0)


class ConstantPad2d(_Pad2d):
    pass


class ReflectionPad2d(_Pad2d):
    mode = "reflect"

    def __init__(self, padding):
        super().__init__(padding)


class ReplicationPad2d(_Pad2d):
    mode = "replicate"

    def __init__(self, padding):
        super().__init__(padding)


class Unflatten(Module):
    def __init__(self, dim: int, unflattened_size):
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, x):
        dim = self.dim % x.ndim
        return ops_functional.reshape(x, tuple(x.shape[:dim]) + self.unflattened_size + tuple(x.shape[dim + 1:]))


class CosineSimilarity(Module):
    def __init__(self, dim: int = 1, eps: float = 1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1, x2):
        return FX.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1, x2):
        return FX.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


class PReLU(Module):
    """``max(0, x) + weight * min(0, x)`` with a learned slope (one, or one per channel)."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None):
        super().__init__()
        self.num_parameters = num_parameters
        self.weight = Parameter(creation.full((num_parameters,), init, device=device, dtype=dtype or "float32"))

    def forward(self, x):
        return _prelu(x, self.weight)


@lower_precision  # under flow.autocast: in float16/bfloat16, as PyTorch's prelu
def _prelu(x, w):
    if w.shape[0] > 1:
        w = ops_functional.reshape(w, (-1,) + (1,) * (x.ndim - 2))
    return ops_functional.where(ops_functional.gt(x, 0), x, x * w)


def _activation(name: str, fn, *arg_names):
    def __init__(self, *args, inplace: bool = False, **kwargs):
        Module.__init__(self)
        values = dict(zip(arg_names, args), **kwargs)
        for key in arg_names:
            if key in values:
                setattr(self, key, values[key])
        self.inplace = inplace

    def forward(self, x):
        extra = [getattr(self, key) for key in arg_names if hasattr(self, key)]
        return fn(x, *extra, inplace=self.inplace) if "inplace" in fn.__code__.co_varnames else fn(x, *extra)

    return type(name, (Module,), {"__init__": __init__, "forward": forward, "__module__": __name__})


SELU = _activation("SELU", FX.selu)
CELU = _activation("CELU", FX.celu, "alpha")
Threshold = _activation("Threshold", FX.threshold, "threshold", "value")
Softsign = _activation("Softsign", FX.softsign)


class GLU(Module):
    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return FX.glu(x, self.dim)


class Softmax2d(Module):
    def forward(self, x):
        return nn_functional.softmax(x, dim=-3)


class FusedBatchNorm2d(BatchNorm2d):
    """OneFlow's ``nn.FusedBatchNorm2d``: ``relu(batch_norm(x) + addend)`` (``addend`` optional,
    a residual added before the ReLU), with BatchNorm2d's parameters, buffers and state dict.
    The exporter fuses convolution, batch norm and ReLU into one node, so this is the same
    graph as ``BatchNorm2d`` followed by ``ReLU``."""

    def forward(self, x, addend=None):
        y = super().forward(x)
        return ops_functional.relu(y if addend is None else y + addend)


class MaxPool3d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices: bool = False,
                 ceil_mode: bool = False):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.return_indices, self.ceil_mode = dilation, return_indices, ceil_mode

    def forward(self, x):
        return F3.max_pool3d(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                             self.return_indices)


class AvgPool3d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override=None):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad, self.divisor_override = ceil_mode, count_include_pad, divisor_override

    def forward(self, x):
        return F3.avg_pool3d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                             self.count_include_pad, self.divisor_override)
