"""Which tensors share memory with what they are made from, and the strides of views, as
OneFlow and PyTorch have them.

OneFlow's ``flow.Tensor(data)`` copies ``data`` into a new float32 tensor
(``TensorWithDataCtor`` -> ``MakeLocalTensorFromData``, which asks numpy for a C-ordered
copy); ``flow.from_numpy(a)`` shares ``a``. Views (transpose, permute, expand, slices,
narrow, ``t()``, unsqueeze, view) have the strides PyTorch 2.13 gives them, and
``contiguous()`` is a C-ordered copy of a tensor that is not contiguous.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flowserve as flow


def test_tensor_of_an_array_is_a_float32_copy_and_from_numpy_shares():
    a = np.arange(6, dtype=np.int64).reshape(2, 3)
    t, shared = flow.Tensor(a), flow.from_numpy(a)
    a[0, 0] = 100
    assert t.dtype == flow.float32 and t.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert shared.dtype == flow.int64 and shared.tolist() == [[100, 1, 2], [3, 4, 5]]
    f = np.ones((3, 2), np.float32).T  # a Fortran-ordered array: the copy is C-ordered
    assert flow.Tensor(f).is_contiguous() and flow.Tensor(f).stride() == (3, 1)
    assert flow.Tensor([1, 2]).dtype == flow.float32 and torch.Tensor([1, 2]).dtype == torch.float32
    assert flow.Tensor(flow.tensor([1, 2])).dtype == flow.float32
    assert flow.Tensor(np.ones(2), dtype=flow.float64).dtype == flow.float64


@pytest.mark.parametrize("args, shape", [((flow.Size([2, 3]),), (2, 3)), ((), (0,))])
def test_tensor_of_a_size_or_of_nothing_is_zeros_of_that_size(args, shape):
    t = flow.Tensor(*args)
    assert tuple(t.shape) == shape and t.dtype == flow.float32
    assert t.tolist() == np.zeros(shape).tolist()
