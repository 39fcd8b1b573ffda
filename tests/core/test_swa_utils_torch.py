"""``flow.optim.swa_utils.update_bn`` against ``torch.optim.swa_utils.update_bn`` on the
same model and batches: running statistics, batch counts, mode and momenta afterwards,
and the eval-mode outputs they give."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flowserve as flow
import flowserve.nn as nn


def _pair(seed: int = 0):
    """The same convnet (two BatchNorm2d, one BatchNorm1d, one with momentum 0.3) in both."""
    flow.manual_seed(seed)
    ours = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 6, 1),
                         nn.BatchNorm2d(6, momentum=0.3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(6, 5),
                         nn.BatchNorm1d(5))
    theirs = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                                 torch.nn.Conv2d(4, 6, 1), torch.nn.BatchNorm2d(6, momentum=0.3),
                                 torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(6, 5),
                                 torch.nn.BatchNorm1d(5))
    theirs.load_state_dict({k: torch.tensor(v.numpy()) for k, v in ours.state_dict().items()})
    return ours, theirs


def _data(rows: int = 21):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((rows, 3, 7, 7)) * 3 + 2).astype(np.float32)
    return x, rng.integers(0, 5, rows)


@pytest.mark.parametrize("eval_first", [True, False])
def test_update_bn_matches_torch_over_a_data_loader(eval_first):
    ours, theirs = _pair()
    if eval_first:
        ours.eval(), theirs.eval()
    x, y = _data()  # 21 rows in batches of 8: 8, 8, 5 (unequal batches weigh the same, as in torch)
    loader = flow.utils.data.DataLoader(flow.utils.data.TensorDataset(flow.tensor(x), flow.tensor(y)), batch_size=8)
    torch_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.tensor(x), torch.tensor(y)),
                                               batch_size=8)
    flow.optim.swa_utils.update_bn(loader, ours)
    torch.optim.swa_utils.update_bn(torch_loader, theirs)
    expected = theirs.state_dict()
    for name, value in ours.state_dict().items():
        np.testing.assert_allclose(value.numpy(), expected[name].numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
    assert int(ours[1].num_batches_tracked) == 3
    assert ours.training == theirs.training == (not eval_first)
    assert [ours[i].momentum for i in (1, 4, 8)] == [theirs[i].momentum for i in (1, 4, 8)] == [0.1, 0.3, 0.1]
    ours.eval(), theirs.eval()
    probe = np.random.default_rng(2).standard_normal((4, 3, 7, 7)).astype(np.float32)
    with torch.no_grad():
        np.testing.assert_allclose(ours(flow.tensor(probe)).numpy(), theirs(torch.tensor(probe)).numpy(),
                                   rtol=1e-4, atol=1e-5)


def test_update_bn_takes_plain_batches_and_numpy_arrays():
    ours, theirs = _pair(3)
    x, _ = _data(12)
    flow.optim.swa_utils.update_bn([x[:6], flow.tensor(x[6:])], ours)
    torch.optim.swa_utils.update_bn([torch.tensor(x[:6]), torch.tensor(x[6:])], theirs)
    for name, value in ours.state_dict().items():
        np.testing.assert_allclose(value.numpy(), theirs.state_dict()[name].numpy(), rtol=1e-5, atol=1e-6)


def test_update_bn_leaves_models_without_tracked_statistics_alone():
    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2, track_running_stats=False))
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    flow.optim.swa_utils.update_bn([flow.randn(4, 3)], model.eval())
    assert not model.training
    assert all(np.array_equal(before[k], v.numpy()) for k, v in model.state_dict().items())


def test_update_bn_names_swapped_arguments():
    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    with pytest.raises(TypeError, match=r"update_bn\(loader, model\).*got list"):
        flow.optim.swa_utils.update_bn(model, [flow.randn(4, 3)])
