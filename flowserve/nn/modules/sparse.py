"""Embedding: a lookup table of learned vectors."""

from __future__ import annotations

from flowserve.nn import functional as nn_functional
from flowserve.nn import init
from flowserve.nn.module import Module
from flowserve.nn.parameter import Parameter
from flowserve.ops import creation


def padding_index(module: str, padding_idx, num_embeddings: int):
    """``padding_idx`` checked against the table size, negative values counted from the end."""
    if padding_idx is None:
        return None
    if not -num_embeddings <= padding_idx < num_embeddings:
        raise ValueError(f"{module} expected padding_idx within num_embeddings={num_embeddings}, got {padding_idx}")
    return padding_idx % num_embeddings


class Embedding(Module):
    """``nn.Embedding(10, 3, padding_idx=0)``: rows of ``weight`` picked by integer indices.

    >>> import flowserve as flow
    >>> emb = flow.nn.Embedding(10, 3)
    >>> emb(flow.tensor([[1, 2], [4, 9]])).shape
    flowserve.Size([2, 2, 3])
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx=None, _weight=None,
                 _freeze: bool = False, device=None, dtype=None):
        super().__init__()
        padding_idx = padding_index("Embedding", padding_idx, num_embeddings)
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        if _weight is None:
            self.weight = Parameter(creation.empty(num_embeddings, embedding_dim, device=device, dtype=dtype),
                                    requires_grad=not _freeze)
            self.reset_parameters()
        else:
            self.weight = Parameter(_weight, requires_grad=not _freeze)

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        if self.padding_idx is not None:
            self.weight._data[self.padding_idx] = 0  # init wrote a fresh array: no one else sees it

    @classmethod
    def from_pretrained(cls, embeddings, freeze: bool = True, padding_idx=None) -> "Embedding":
        rows, cols = embeddings.shape
        return cls(rows, cols, padding_idx, _weight=embeddings.detach().clone(), _freeze=freeze)

    def forward(self, x):
        return nn_functional.embedding(x, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        return s + (f", padding_idx={self.padding_idx}" if self.padding_idx is not None else "")


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
