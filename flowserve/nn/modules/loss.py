"""Loss modules (PyTorch's constructors, buffers and reductions)."""

from __future__ import annotations

from flowserve.nn import functional as nn_functional
from flowserve.nn.module import Module


class _Loss(Module):
    def __init__(self, reduction: str = "mean"):
        super().__init__()
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"{type(self).__name__} expected reduction 'mean', 'sum' or 'none', got {reduction!r}")
        self.reduction = reduction


class _WeightedLoss(_Loss):
    def __init__(self, weight=None, reduction: str = "mean"):
        super().__init__(reduction)
        self.register_buffer("weight", weight)


class MSELoss(_Loss):
    def forward(self, input, target):
        return nn_functional.mse_loss(input, target, self.reduction)


class L1Loss(_Loss):
    def forward(self, input, target):
        return nn_functional.l1_loss(input, target, self.reduction)


class SmoothL1Loss(_Loss):
    def __init__(self, reduction: str = "mean", beta: float = 1.0):
        super().__init__(reduction)
        self.beta = beta

    def forward(self, input, target):
        return nn_functional.smooth_l1_loss(input, target, self.reduction, self.beta)


class HuberLoss(_Loss):
    def __init__(self, reduction: str = "mean", delta: float = 1.0):
        super().__init__(reduction)
        self.delta = delta

    def forward(self, input, target):
        return nn_functional.huber_loss(input, target, self.reduction, self.delta)


class NLLLoss(_WeightedLoss):
    def __init__(self, weight=None, ignore_index: int = -100, reduction: str = "mean"):
        super().__init__(weight, reduction)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return nn_functional.nll_loss(input, target, self.weight, self.ignore_index, self.reduction)


class CrossEntropyLoss(_WeightedLoss):
    """Softmax cross entropy: class indices (with ``ignore_index``) or class probabilities,
    class ``weight`` and ``label_smoothing``, as ``torch.nn.CrossEntropyLoss``."""

    def __init__(self, weight=None, ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0):
        super().__init__(weight, reduction)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, input, target):
        return nn_functional.cross_entropy(input, target, self.weight, self.ignore_index, self.reduction,
                               self.label_smoothing)


class BCELoss(_WeightedLoss):
    def forward(self, input, target):
        return nn_functional.binary_cross_entropy(input, target, self.weight, self.reduction)


class BCEWithLogitsLoss(_WeightedLoss):
    def __init__(self, weight=None, reduction: str = "mean", pos_weight=None):
        super().__init__(weight, reduction)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input, target):
        return nn_functional.binary_cross_entropy_with_logits(
            input, target, self.weight, self.reduction, self.pos_weight
        )


class KLDivLoss(_Loss):
    def __init__(self, reduction: str = "mean", log_target: bool = False):
        super().__init__(reduction if reduction != "batchmean" else "mean")
        self.reduction, self.log_target = reduction, log_target

    def forward(self, input, target):
        return nn_functional.kl_div(input, target, self.reduction, self.log_target)


class CTCLoss(_Loss):
    """The connectionist temporal classification loss, as ``torch.nn.CTCLoss``:
    ``loss(log_probs, targets, input_lengths, target_lengths)``."""

    def __init__(self, blank: int = 0, reduction: str = "mean", zero_infinity: bool = False):
        super().__init__(reduction)
        self.blank, self.zero_infinity = blank, zero_infinity

    def forward(self, log_probs, targets, input_lengths, target_lengths):
        return nn_functional.ctc_loss(log_probs, targets, input_lengths, target_lengths, self.blank, self.reduction,
                          self.zero_infinity)


class MarginRankingLoss(_Loss):
    def __init__(self, margin: float = 0.0, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(reduction)
        self.margin = margin

    def forward(self, input1, input2, target):
        return nn_functional.margin_ranking_loss(input1, input2, target, self.margin, reduction=self.reduction)


class HingeEmbeddingLoss(_Loss):
    def __init__(self, margin: float = 1.0, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(reduction)
        self.margin = margin

    def forward(self, input, target):  # noqa: A002
        return nn_functional.hinge_embedding_loss(input, target, self.margin, reduction=self.reduction)


class SoftMarginLoss(_Loss):
    def forward(self, input, target):  # noqa: A002
        return nn_functional.soft_margin_loss(input, target, reduction=self.reduction)


class CosineEmbeddingLoss(_Loss):
    def __init__(self, margin: float = 0.0, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(reduction)
        self.margin = margin

    def forward(self, input1, input2, target):
        return nn_functional.cosine_embedding_loss(input1, input2, target, self.margin, reduction=self.reduction)


class TripletMarginLoss(_Loss):
    def __init__(self, margin: float = 1.0, p: float = 2.0, eps: float = 1e-6, swap: bool = False,
                 size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(reduction)
        self.margin, self.p, self.eps, self.swap = margin, p, eps, swap

    def forward(self, anchor, positive, negative):
        return nn_functional.triplet_margin_loss(anchor, positive, negative, self.margin, self.p, self.eps, self.swap,
                                      reduction=self.reduction)


class PoissonNLLLoss(_Loss):
    def __init__(self, log_input: bool = True, full: bool = False, size_average=None, eps: float = 1e-8,
                 reduce=None, reduction: str = "mean"):
        super().__init__(reduction)
        self.log_input, self.full, self.eps = log_input, full, eps

    def forward(self, log_input, target):
        return nn_functional.poisson_nll_loss(log_input, target, self.log_input, self.full, eps=self.eps,
                                   reduction=self.reduction)


class GaussianNLLLoss(_Loss):
    def __init__(self, *, full: bool = False, eps: float = 1e-6, reduction: str = "mean"):
        super().__init__(reduction)
        self.full, self.eps = full, eps

    def forward(self, input, target, var):  # noqa: A002
        return nn_functional.gaussian_nll_loss(input, target, var, self.full, self.eps, self.reduction)


class MultiLabelSoftMarginLoss(_Loss):
    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(reduction)
        self.register_buffer("weight", weight)

    def forward(self, input, target):  # noqa: A002
        return nn_functional.multilabel_soft_margin_loss(input, target, self.weight, reduction=self.reduction)
