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


VIEWS = {  # each applied to arange(24).reshape(2, 3, 4), in flowserve and in torch
    "transpose": lambda x: x.transpose(0, 1),
    "transpose_contiguous": lambda x: x.transpose(0, 1).contiguous(),
    "transpose_contiguous_transpose": lambda x: x.transpose(0, 1).contiguous().transpose(0, 1),
    "permute": lambda x: x.permute(2, 0, 1),
    "permute_contiguous": lambda x: x.permute(2, 0, 1).contiguous(),
    "permute_contiguous_permute": lambda x: x.permute(2, 0, 1).contiguous().permute(1, 2, 0),
    "expand": lambda x: x[:, :1, :].expand(2, 5, 4),
    "expand_new_dim": lambda x: x.expand(3, 2, 3, 4),
    "expand_contiguous": lambda x: x[:, :1, :].expand(2, 5, 4).contiguous(),
    "slice_middle": lambda x: x[:, 1:],
    "slice_step": lambda x: x[..., ::2],
    "slice_outer": lambda x: x[:1],
    "index_row": lambda x: x[1],
    "index_inner": lambda x: x[:, :, 1],
    "index_inner_contiguous": lambda x: x[:, :, 1].contiguous(),
    "narrow_inner": lambda x: x.narrow(2, 1, 2),
    "narrow_outer": lambda x: x.narrow(0, 1, 1),
    "t": lambda x: x[0].t(),
    "t_contiguous": lambda x: x[0].t().contiguous(),
    "t_contiguous_t": lambda x: x[0].t().contiguous().t(),
    "mT": lambda x: x.mT,
    "unsqueeze_first": lambda x: x.unsqueeze(0),
    "unsqueeze_middle": lambda x: x.unsqueeze(1),
    "unsqueeze_last": lambda x: x.unsqueeze(-1),
    "unsqueeze_of_transpose": lambda x: x.transpose(0, 2).unsqueeze(1),
    "unsqueeze_last_of_transpose": lambda x: x.transpose(0, 2).unsqueeze(3),
    "unsqueeze_last_of_slice": lambda x: x[:, :, ::2].unsqueeze(-1),
    "unsqueeze_of_slice": lambda x: x[:, :, ::2].unsqueeze(2),
    "view": lambda x: x.view(6, 4),
    "view_flat": lambda x: x.view(-1),
    "view_of_slice": lambda x: x[:, 1:].view(2, 8),
    "view_of_contiguous_transpose": lambda x: x.transpose(1, 2).contiguous().view(2, 12),
    "view_split_of_transpose": lambda x: x.transpose(0, 2).view(2, 2, 3, 2),
    "view_size_one_of_transpose": lambda x: x.transpose(0, 2).view(4, 3, 2, 1),
    "squeeze_of_narrow": lambda x: x.narrow(1, 1, 1).squeeze(1),
    "transpose_of_size_one_dims": lambda x: x[:1, :1].transpose(0, 1),
    "empty_slice": lambda x: x[:, 3:],
}


@pytest.mark.parametrize("name", VIEWS)
def test_view_strides_and_contiguity_follow_torch(name):
    fn = VIEWS[name]
    got = fn(flow.tensor(np.arange(24, dtype=np.float32).reshape(2, 3, 4)))
    want = fn(torch.arange(24, dtype=torch.float32).reshape(2, 3, 4))
    assert (got.is_contiguous(), tuple(got.stride()), tuple(got.shape)) == \
        (want.is_contiguous(), tuple(want.stride()), tuple(want.shape))
    assert got.tolist() == want.tolist()


def test_contiguous_copies_a_strided_tensor_and_passes_the_gradient():
    x = flow.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=True)
    same = x.contiguous()
    assert same is x
    c = x.t().contiguous()
    assert c.is_contiguous() and c.stride() == (2, 1) and c.tolist() == [[0, 3], [1, 4], [2, 5]]
    (c * flow.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])).sum().backward()
    assert x.grad.tolist() == [[1.0, 3.0, 5.0], [2.0, 4.0, 6.0]]
