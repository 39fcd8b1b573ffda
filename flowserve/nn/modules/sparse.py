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
