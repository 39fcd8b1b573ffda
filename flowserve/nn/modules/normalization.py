"""Normalisation modules: BatchNorm1d/2d, LayerNorm, GroupNorm (PyTorch's parameters, buffers,
running-statistics rules and state_dict keys)."""

from __future__ import annotations

from flowserve import dtypes, env
from flowserve.nn import init
from flowserve.nn.module import Module
from flowserve.nn.parameter import Parameter
from flowserve.ops import creation
from flowserve.ops import functional as ops_functional
from flowserve.ops import norm as norm_ops
from flowserve.ops.registry import fail_shape
from flowserve.nn import functional as nn_functional


class _BatchNorm(Module):
    _input_dims: tuple = ()
    _input_text = ""
    _sync = False  # batch statistics over the ranks of a distributed run

    def __init__(self, num_features: int, eps: float = 1e-5, momentum=0.1, affine: bool = True,
                 track_running_stats: bool = True, device=None, dtype=None):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight = Parameter(creation.ones(num_features, device=device, dtype=dtype))
            self.bias = Parameter(creation.zeros(num_features, device=device, dtype=dtype))
        else:
            self.weight = self.bias = None
        if track_running_stats:
            self.register_buffer("running_mean", creation.zeros(num_features, device=device, dtype=dtype))
            self.register_buffer("running_var", creation.ones(num_features, device=device, dtype=dtype))
            self.register_buffer("num_batches_tracked", creation.zeros((), dtype=dtypes.int64, device=device))
        else:
            self.running_mean = self.running_var = self.num_batches_tracked = None

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            self.running_mean.zero_()
            self.running_var.fill_(1)
            self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            init.zeros_(self.bias)

    def forward(self, x):
        name = type(self).__name__
        if x.ndim not in self._input_dims or x.shape[1] != self.num_features:
            fail_shape(name, self._input_text.format(c=self.num_features), tuple(x.shape))
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                factor = 1.0 / ops_functional.cast(self.num_batches_tracked, x.dtype)
        use_batch_stats = self.training or self.running_mean is None
        track = not self.training or self.track_running_stats
        return norm_ops.batch_norm(x, self.running_mean if track else None, self.running_var if track else None,
                            self.weight, self.bias, use_batch_stats, factor, self.eps, op=name,
                            sync=self._sync and use_batch_stats and env.get_world_size() > 1)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch normalisation over (N, C) or (N, C, L)."""

    _input_dims = (2, 3)
    _input_text = "input (N, {c}) or (N, {c}, L)"


class BatchNorm2d(_BatchNorm):
    """Batch normalisation over (N, C, H, W), as ``torch.nn.BatchNorm2d``.

    >>> import flowserve as flow
    >>> bn = flow.nn.BatchNorm2d(4)
    >>> bn(flow.randn(2, 4, 5, 5)).shape, int(bn.num_batches_tracked)
    (flowserve.Size([2, 4, 5, 5]), 1)
    """

    _input_dims = (4,)
    _input_text = "input (N, {c}, H, W)"


class SyncBatchNorm(_BatchNorm):
    """Batch normalisation whose training statistics are those of the batches of all ranks
    together (``torch.nn.SyncBatchNorm``); in a world of one process, ``BatchNorm``.

    >>> import flowserve as flow
    >>> net = flow.nn.SyncBatchNorm.convert_sync_batchnorm(flow.nn.Sequential(flow.nn.BatchNorm2d(3)))
    >>> type(net[0]).__name__
    'SyncBatchNorm'
    """

    _input_dims = (2, 3, 4, 5)
    _input_text = "input (N, {c}, *)"
    _sync = True

    @classmethod
    def convert_sync_batchnorm(cls, module: Module) -> Module:
        """``module`` with every BatchNorm replaced by a SyncBatchNorm sharing its parameters
        and buffers (the module itself when it is a BatchNorm)."""
        if isinstance(module, _BatchNorm) and not isinstance(module, cls):
            sync = cls(module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats)
            for name in ("weight", "bias", "running_mean", "running_var", "num_batches_tracked"):
                if getattr(module, name, None) is not None:
                    setattr(sync, name, getattr(module, name))
            sync.train(module.training)
            return sync
        for name, child in list(module._modules.items()):
            if child is not None:
                setattr(module, name, cls.convert_sync_batchnorm(child))  # keeps its place
        return module


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.normalized_shape, self.eps, self.elementwise_affine = shape, eps, elementwise_affine
        self.weight = Parameter(creation.ones(*shape, device=device, dtype=dtype)) if elementwise_affine else None
        self.bias = Parameter(creation.zeros(*shape, device=device, dtype=dtype)) \
            if elementwise_affine and bias else None

    def forward(self, x):
        return norm_ops.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class GroupNorm(Module):
    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 device=None, dtype=None):
        super().__init__()
        if num_channels % num_groups:
            raise ValueError(f"GroupNorm expected num_channels divisible by num_groups, "
                             f"got {num_channels} and {num_groups}")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        self.weight = Parameter(creation.ones(num_channels, device=device, dtype=dtype)) if affine else None
        self.bias = Parameter(creation.zeros(num_channels, device=device, dtype=dtype)) if affine else None

    def forward(self, x):
        if x.ndim < 2 or x.shape[1] != self.num_channels:
            fail_shape("GroupNorm", f"input (N, {self.num_channels}, ...)", tuple(x.shape))
        return norm_ops.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"


class BatchNorm3d(_BatchNorm):
    """Batch normalisation over (N, C, D, H, W), as ``torch.nn.BatchNorm3d``."""

    _input_dims = (5,)
    _input_text = "input (N, {c}, D, H, W)"


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
        out = nn_functional.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                               not use_running, self.momentum, self.eps)
        return ops_functional.squeeze(out, 0) if unbatched else out

    def _update_running_stats(self, x) -> None:
        """PyTorch's rule: the per-instance statistics (unbiased variance), averaged over the batch."""
        axes = tuple(range(2, x.ndim))
        count = x.numel() // (x.shape[0] * x.shape[1])
        with_grad_off = x.detach()
        mean = ops_functional.mean(with_grad_off, dim=axes)
        var = ops_functional.mean(
            (with_grad_off - ops_functional.reshape(mean, tuple(mean.shape) + (1,) * len(axes))) ** 2, dim=axes
        )
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


class FusedBatchNorm2d(BatchNorm2d):
    """OneFlow's ``nn.FusedBatchNorm2d``: ``relu(batch_norm(x) + addend)`` (``addend`` optional,
    a residual added before the ReLU), with BatchNorm2d's parameters, buffers and state dict.
    The exporter fuses convolution, batch norm and ReLU into one node, so this is the same
    graph as ``BatchNorm2d`` followed by ``ReLU``."""

    def forward(self, x, addend=None):
        y = super().forward(x)
        return ops_functional.relu(y if addend is None else y + addend)


class RMSNorm(Module):
    """``x / sqrt(mean(x^2) + eps) * weight`` over ``normalized_shape`` (``torch.nn.RMSNorm``)."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine: bool = True, device=None, dtype=None):
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.normalized_shape, self.eps, self.elementwise_affine = shape, eps, elementwise_affine
        self.weight = Parameter(creation.ones(*shape, device=device, dtype=dtype)) if elementwise_affine else None

    def forward(self, x):
        return nn_functional.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
