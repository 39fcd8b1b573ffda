"""``default_collate`` (samples -> a batch) and ``default_convert``, as PyTorch's."""

from __future__ import annotations

import collections.abc as abc
import numbers

import numpy as np

from flowserve.ops.creation import tensor
from flowserve.ops.functional import stack
from flowserve.tensor import Tensor


def _is_namedtuple(x) -> bool:
    return isinstance(x, tuple) and hasattr(x, "_fields")


def _numpy_to_tensor(array: np.ndarray) -> Tensor:
    if array.dtype.kind in "USO":
        raise TypeError(f"default_collate: numpy arrays of dtype {array.dtype} cannot become tensors")
    return tensor(array)


def _collate_numbers(batch: list) -> Tensor:
    elem = batch[0]
    if isinstance(elem, np.generic):
        return _numpy_to_tensor(np.asarray(batch))
    if isinstance(elem, float):
        return tensor(np.asarray(batch, dtype=np.float64))
    return tensor(np.asarray(batch))  # ints become int64, bools bool


def _collate_sequence(batch: list):
    elem = batch[0]
    size = len(elem)
    if any(len(x) != size for x in batch):
        raise RuntimeError(f"default_collate: each element in list of batch should be of equal size, "
                           f"got sizes {[len(x) for x in batch]}")
    columns = [default_collate(list(samples)) for samples in zip(*batch)]
    if _is_namedtuple(elem):
        return type(elem)(*columns)
    if isinstance(elem, tuple):
        return columns  # PyTorch returns a list for tuples too
    return _same_type(elem, columns)


def default_collate(batch: list):
    """Stack a list of samples into a batch: tensors and numpy arrays stack along a new
    dim 0, Python floats become float64 tensors and ints int64, strings stay a list, and
    dicts, tuples and lists are collated field by field.

    >>> import flowserve as flow
    >>> batch = default_collate([(flow.ones(2), 1), (flow.zeros(2), 0)])
    >>> batch[0].shape, batch[1].tolist()
    (flowserve.Size([2, 2]), [1, 0])
    """
    elem = batch[0]
    if isinstance(elem, Tensor):
        return stack(batch, 0)
    if isinstance(elem, np.ndarray):
        return stack([_numpy_to_tensor(a) for a in batch], 0)
    if isinstance(elem, (np.bool_, np.number, numbers.Number)) and not isinstance(elem, complex):
        return _collate_numbers(batch)
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, abc.Mapping):
        return _same_type(elem, {key: default_collate([d[key] for d in batch]) for key in elem})
    if isinstance(elem, abc.Sequence):
        return _collate_sequence(batch)
    raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or "
                    f"lists; found {type(elem).__name__}")


def default_convert(data):
    """Without batching (``batch_size=None``): numpy arrays and numpy scalars become
    tensors, containers are converted element by element, the rest is kept."""
    if isinstance(data, np.ndarray) and data.dtype.kind not in "USO":
        return _numpy_to_tensor(data)
    if isinstance(data, (np.bool_, np.number)):
        return _numpy_to_tensor(np.asarray(data))
    if isinstance(data, abc.Mapping):
        return _same_type(data, {k: default_convert(v) for k, v in data.items()})
    if _is_namedtuple(data):
        return type(data)(*(default_convert(v) for v in data))
    if isinstance(data, tuple):
        return [default_convert(v) for v in data]
    if isinstance(data, abc.Sequence) and not isinstance(data, (str, bytes)):
        return _same_type(data, [default_convert(v) for v in data])
    return data


def _same_type(original, converted):
    try:
        return type(original)(converted)
    except TypeError:
        return converted
