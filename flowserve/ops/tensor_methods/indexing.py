"""``Tensor`` indexing and selection: ``x[i]``, ``x[i] = v``, ``gather``, ``scatter``,
``index_select``, ``masked_fill``, ``split``, ``topk``, ``sort``, ``tril``, ..."""

from __future__ import annotations

from flowserve.ops import functional


class IndexingMethods:
    """Reading, writing and rearranging elements by position."""

    __slots__ = ()

    __getitem__ = functional.getitem

    def __setitem__(self, key, value) -> None:
        functional.setitem(self, key, value)

    def where(self, condition, y):
        return functional.where(condition, self, y)

    gather, take_along_dim = functional.gather, functional.take_along_dim
    scatter, scatter_add = functional.scatter, functional.scatter_add
    index_select, index_add = functional.index_select, functional.index_add
    index_copy, index_fill = functional.index_copy, functional.index_fill
    masked_fill, masked_select = functional.masked_fill, functional.masked_select
    nonzero, argwhere = functional.nonzero, functional.argwhere
    narrow, split, chunk = functional.narrow, functional.split, functional.chunk
    tensor_split, unbind = functional.tensor_split, functional.unbind
    repeat, tile, flip, roll = functional.repeat, functional.tile, functional.flip, functional.roll
    tril, triu = functional.tril, functional.triu
    topk, sort, argsort, msort = functional.topk, functional.sort, functional.argsort, functional.msort
