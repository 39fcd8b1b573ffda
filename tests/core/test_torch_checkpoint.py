"""``flow.load`` of PyTorch checkpoints (torch 2.13's zip format) and safetensors files:
weights load exactly, and a checkpoint that would run code is refused before anything runs."""

from __future__ import annotations

import os
import pickle
import zipfile

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import flowserve as flow
from flowserve import models
from flowserve.errors import SavedGraphError
from flowserve.serialization.torch_checkpoint import CheckpointError
from tests.core.test_models import TorchResNet18


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5 * max(1.0, np.abs(b).max()))


def test_resnet18_state_dict_from_torch(tmp_path):
    torch.manual_seed(0)
    twin = TorchResNet18(10, True).eval()
    with torch.no_grad():  # non-trivial running statistics
        for m in twin.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
    torch.save(twin.state_dict(), tmp_path / "resnet18.pth")
    state = flow.load(tmp_path / "resnet18.pth")
    assert list(state) == list(twin.state_dict())
    model = models.resnet18(num_classes=10).eval()
    model.load_state_dict(state)
    x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    with torch.no_grad():
        ref = twin(torch.from_numpy(x)).numpy()
    _close(model(flow.tensor(x)).numpy(), ref)


def test_transformer_state_dict_from_torch(tmp_path):
    torch.manual_seed(1)
    twin = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True).eval()
    torch.save(twin.state_dict(), tmp_path / "layer.pt")
    model = flow.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True).eval()
    model.load_state_dict(flow.load(tmp_path / "layer.pt"))
    x = np.random.default_rng(1).standard_normal((2, 5, 16)).astype(np.float32)
    with torch.no_grad():
        ref = twin(torch.from_numpy(x)).numpy()
    _close(model(flow.tensor(x)).numpy(), ref)


def test_optimizer_state_from_torch_continues_identically(tmp_path):
    torch.manual_seed(2)
    twin = torch.nn.Linear(4, 3)
    opt = torch.optim.Adam(twin.parameters(), lr=0.01, amsgrad=True)
    x = torch.randn(8, 4)
    for _ in range(3):
        opt.zero_grad()
        twin(x).square().sum().backward()
        opt.step()
    torch.save({"model": twin.state_dict(), "optimizer": opt.state_dict(), "epoch": 3}, tmp_path / "ckpt.pt")
    ckpt = flow.load(tmp_path / "ckpt.pt", map_location="cpu")
    assert ckpt["epoch"] == 3
    model = flow.nn.Linear(4, 3)
    model.load_state_dict(ckpt["model"])
    mine = flow.optim.Adam(model.parameters(), lr=0.01, amsgrad=True)
    mine.load_state_dict(ckpt["optimizer"])
    for _ in range(2):
        opt.zero_grad()
        twin(x).square().sum().backward()
        opt.step()
        mine.zero_grad()
        model(flow.tensor(x.numpy())).square().sum().backward()
        mine.step()
    _close(model.weight.numpy(), twin.weight.detach().numpy())
    _close(model.bias.numpy(), twin.bias.detach().numpy())


def test_layouts_and_dtypes(tmp_path):
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    objects = {"t": base.t(), "slice": base[1:, 2:5], "view_a": base[0], "half": base.half(),
               "bf16": base.bfloat16(), "long": torch.arange(5), "bool": base > 7, "scalar": torch.tensor(3.5),
               "empty": torch.zeros(0, 3), "param": torch.nn.Parameter(torch.ones(2)), "nested": [(1, "a"), None]}
    torch.save(objects, tmp_path / "mix.pt")
    got = flow.load(tmp_path / "mix.pt")
    for key in ("t", "slice", "view_a", "half", "long", "bool", "scalar", "empty"):
        np.testing.assert_array_equal(got[key].numpy(), objects[key].numpy(), err_msg=key)
    np.testing.assert_array_equal(got["bf16"].float().numpy(), objects["bf16"].float().numpy())
    assert got["bf16"].dtype is flow.bfloat16 and isinstance(got["param"], flow.nn.Parameter)
    assert got["nested"] == [(1, "a"), None]


def test_safetensors_from_torch(tmp_path):
    tensors = {"w": torch.randn(3, 4), "b": torch.arange(3, dtype=torch.int64), "h": torch.randn(2).half(),
               "bf": torch.randn(2, 2).bfloat16()}  # bfloat16: LLM weights are often stored so
    save_file(tensors, str(tmp_path / "model.safetensors"))
    got = flow.load(tmp_path / "model.safetensors")
    for k, v in tensors.items():
        np.testing.assert_array_equal(got[k].float().numpy(), v.float().numpy(), err_msg=k)
    assert got["bf"].dtype is flow.bfloat16 and got["h"].dtype is flow.float16
    raw = (tmp_path / "model.safetensors").read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(raw[:-4])
    with pytest.raises(SavedGraphError, match="cut.safetensors"):
        flow.load(tmp_path / "cut.safetensors")


class _Evil:
    """Unpickling this would run a shell command that writes a sentinel file."""

    def __init__(self, sentinel):
        self.sentinel = sentinel

    def __reduce__(self):
        return os.system, (f"touch {self.sentinel}",)


class _EvalEvil:
    def __init__(self, sentinel):
        self.sentinel = sentinel

    def __reduce__(self):
        return eval, (f"open({str(self.sentinel)!r}, 'w').close()",)


@pytest.mark.parametrize("evil", [_Evil, _EvalEvil])
def test_malicious_checkpoint_is_refused_and_runs_nothing(tmp_path, evil):
    sentinel = tmp_path / "sentinel"
    torch.save({"weight": torch.ones(2), "payload": evil(sentinel)}, tmp_path / "evil.pt")
    with pytest.raises(CheckpointError, match=r"global (posix\.system|__builtin__\.eval).*nothing was run"):
        flow.load(tmp_path / "evil.pt")
    assert not sentinel.exists()
    with pytest.raises(Exception):  # torch's own weights-only reader agrees
        torch.load(tmp_path / "evil.pt", weights_only=True)
    assert not sentinel.exists()


def test_raw_pickle_is_refused_unread(tmp_path):
    sentinel = tmp_path / "sentinel"
    (tmp_path / "evil.pkl").write_bytes(pickle.dumps(_Evil(sentinel), protocol=2))
    with pytest.raises(SavedGraphError, match="raw pickle"):
        flow.load(tmp_path / "evil.pkl")
    assert not sentinel.exists()


def test_damaged_checkpoints_give_clear_errors(tmp_path):
    torch.save({"w": torch.arange(12, dtype=torch.float32)}, tmp_path / "ok.pt")
    with zipfile.ZipFile(tmp_path / "ok.pt") as src, zipfile.ZipFile(tmp_path / "short.pt", "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            dst.writestr(item, data[:8] if item.filename.endswith("data/0") else data)
    with pytest.raises(CheckpointError, match="past its storage"):
        flow.load(tmp_path / "short.pt")
    raw = (tmp_path / "ok.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(SavedGraphError, match="cut.pt"):
        flow.load(tmp_path / "cut.pt")
