"""Modules of PyTorch's that ported models reach for: ``ConvTranspose3d``,
``AdaptiveAvgPool3d``, ``AdaptiveMaxPool3d``, ``EmbeddingBag`` and ``CTCLoss`` (PyTorch's
constructors, parameter names and initialisation; the functional forms are in
``flowserve.nn.functional_3d`` and ``flowserve.nn.functional_seq``)."""

from __future__ import annotations

from flowserve.nn import functional as nn_functional
from flowserve.nn import init
from flowserve.nn.module import Module
from flowserve.nn.modules.conv import _ConvTransposeNd
from flowserve.nn.modules.loss import _Loss
from flowserve.nn.modules.sparse import padding_index
from flowserve.nn.parameter import Parameter
from flowserve.ops import creation


class ConvTranspose3d(_ConvTransposeNd):
    """Transposed 3-d convolution over (N, C, D, H, W), as ``torch.nn.ConvTranspose3d``
    (weight (in, out/groups, kD, kH, kW))."""

    _dims = 3

    def forward(self, x):
        return nn_functional.conv_transpose3d(x, self.weight, self.bias, self.stride, self.padding, self.output_padding,
                                  self.groups, self.dilation)


class AdaptiveAvgPool3d(Module):
    """Average pooling of (N, C, D, H, W) to ``output_size`` (an int or three, ``None`` keeps a dim)."""

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, x):
        return nn_functional.adaptive_avg_pool3d(x, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveMaxPool3d(Module):
    """Max pooling of (N, C, D, H, W) to ``output_size``; ``return_indices`` as PyTorch."""

    def __init__(self, output_size, return_indices: bool = False):
        super().__init__()
        self.output_size, self.return_indices = output_size, return_indices

    def forward(self, x):
        return nn_functional.adaptive_max_pool3d(x, self.output_size, self.return_indices)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class EmbeddingBag(Module):
    """Sums, means or maxima of bags of embeddings, as ``torch.nn.EmbeddingBag``:
    ``bag(input, offsets=None, per_sample_weights=None)``.

    >>> import flowserve as flow
    >>> bag = flow.nn.EmbeddingBag(10, 3, mode="sum")
    >>> bag(flow.tensor([1, 2, 4, 5, 4, 3]), flow.tensor([0, 2])).shape
    flowserve.Size([2, 3])
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, max_norm=None, norm_type: float = 2.0,
                 scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False, _weight=None,
                 include_last_offset: bool = False, padding_idx=None, device=None, dtype=None):
        super().__init__()
        if mode not in ("sum", "mean", "max"):
            raise ValueError(f"EmbeddingBag expected mode 'sum', 'mean' or 'max', got {mode!r}")
        if max_norm is not None or scale_grad_by_freq:
            raise ValueError("EmbeddingBag: max_norm and scale_grad_by_freq are not in flowserve")
        padding_idx = padding_index("EmbeddingBag", padding_idx, num_embeddings)
        self.num_embeddings, self.embedding_dim, self.mode = num_embeddings, embedding_dim, mode
        self.max_norm, self.norm_type, self.scale_grad_by_freq, self.sparse = max_norm, norm_type, False, sparse
        self.include_last_offset, self.padding_idx = include_last_offset, padding_idx
        if _weight is None:
            self.weight = Parameter(creation.empty(num_embeddings, embedding_dim, device=device, dtype=dtype))
            self.reset_parameters()
        else:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise ValueError(f"EmbeddingBag expected _weight of shape ({num_embeddings}, {embedding_dim}), "
                                 f"got {tuple(_weight.shape)}")
            self.weight = Parameter(_weight)

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        if self.padding_idx is not None:
            self.weight._data[self.padding_idx] = 0  # init wrote a fresh array: no one else sees it

    @classmethod
    def from_pretrained(cls, embeddings, freeze: bool = True, max_norm=None, norm_type: float = 2.0,
                        scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False,
                        include_last_offset: bool = False, padding_idx=None) -> "EmbeddingBag":
        rows, cols = embeddings.shape
        bag = cls(rows, cols, max_norm, norm_type, scale_grad_by_freq, mode, sparse, embeddings.detach().clone(),
                  include_last_offset, padding_idx)
        bag.weight.requires_grad = not freeze
        return bag

    def forward(self, input, offsets=None, per_sample_weights=None):  # noqa: A002
        return nn_functional.embedding_bag(input, self.weight, offsets, mode=self.mode, sparse=self.sparse,
                               per_sample_weights=per_sample_weights, include_last_offset=self.include_last_offset,
                               padding_idx=self.padding_idx)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}, mode={self.mode!r}"
        return s + (f", padding_idx={self.padding_idx}" if self.padding_idx is not None else "")


class CTCLoss(_Loss):
    """The connectionist temporal classification loss, as ``torch.nn.CTCLoss``:
    ``loss(log_probs, targets, input_lengths, target_lengths)``."""

    def __init__(self, blank: int = 0, reduction: str = "mean", zero_infinity: bool = False):
        super().__init__(reduction)
        self.blank, self.zero_infinity = blank, zero_infinity

    def forward(self, log_probs, targets, input_lengths, target_lengths):
        return nn_functional.ctc_loss(log_probs, targets, input_lengths, target_lengths, self.blank, self.reduction,
                          self.zero_infinity)
