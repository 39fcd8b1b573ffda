"""Devices: ``"cpu"`` always; ``"cuda"`` through CuPy where CuPy and a GPU are usable,
otherwise a one-line ``DeviceError`` that says why."""

from __future__ import annotations

import importlib
import sys
import types

import numpy as np
import pytest

import flowserve as flow
from flowserve.errors import DeviceError

device_module = importlib.import_module("flowserve.device")  # flow.device is the class
_skip_without_gpu = pytest.mark.skipif(not flow.cuda.is_available(), reason="no usable CUDA GPU with CuPy here")


def needs_gpu(test):
    """Marked ``gpu`` (``pytest -m gpu`` runs it) and skipped without a GPU."""
    return pytest.mark.gpu(_skip_without_gpu(test))


without_gpu = pytest.mark.skipif(flow.cuda.is_available(), reason="a CUDA GPU is usable here")


def test_device_specs():
    assert flow.device("cuda") == flow.device("cuda:0") == flow.device(0) == "cuda:0"
    assert flow.device("cuda:1").index == 1 and flow.device("cpu").index is None
    assert str(flow.device("cuda", 2)) == "cuda:2" and repr(flow.device("cpu")) == "device(type='cpu')"
    assert len({flow.device("cuda"), flow.device("cuda:0"), flow.device("cpu")}) == 2
    for bad in ("tpu", "cuda:x", "gpu:0"):
        with pytest.raises(DeviceError, match=f"expected device 'cpu' or 'cuda\\[:N\\]', got '{bad}'"):
            flow.device(bad)


@without_gpu
def test_cuda_is_unavailable_and_every_way_to_it_says_why():
    assert flow.cuda.is_available() is False and flow.cuda.device_count() == 0
    model = flow.nn.Linear(2, 2)
    attempts = [lambda: flow.ones(2).to("cuda"), lambda: flow.ones(2).cuda(), lambda: model.to("cuda"),
                lambda: flow.zeros(2, device="cuda"), lambda: flow.tensor([1.0], device="cuda:0"),
                lambda: flow.randn(3, device=flow.device("cuda"))]
    for attempt in attempts:
        with pytest.raises(DeviceError) as err:
            attempt()
        message = str(err.value)
        assert message.startswith("cannot use device 'cuda:0': ") and "\n" not in message
    assert all(p.device == flow.device("cpu") for p in model.parameters())


@pytest.fixture
def fake_cupy(monkeypatch):
    """Install a stand-in ``cupy`` whose CUDA runtime answers as configured."""
    runtime = types.SimpleNamespace()
    module = types.ModuleType("cupy")
    module.cuda = types.SimpleNamespace(runtime=runtime)
    monkeypatch.setitem(sys.modules, "cupy", module)
    device_module._cuda_status.cache_clear()
    yield runtime
    device_module._cuda_status.cache_clear()


def test_cupy_without_a_driver_is_reported_on_one_line(fake_cupy):
    def no_driver():
        raise RuntimeError("cudaErrorInsufficientDriver:\nCUDA driver version is insufficient")

    fake_cupy.getDeviceCount = no_driver
    assert not flow.cuda.is_available()
    with pytest.raises(DeviceError, match="CuPy found no usable CUDA driver "
                                          r"\(cudaErrorInsufficientDriver: CUDA driver version is insufficient\)$"):
        flow.ones(1).to("cuda")


def test_cupy_without_a_gpu_and_an_index_out_of_range(fake_cupy):
    fake_cupy.getDeviceCount = lambda: 0
    with pytest.raises(DeviceError, match="no CUDA GPU is visible"):
        flow.ones(1).to("cuda")
    device_module._cuda_status.cache_clear()
    fake_cupy.getDeviceCount = lambda: 1
    assert flow.cuda.is_available() and flow.cuda.device_count() == 1
    with pytest.raises(DeviceError, match=r"'cuda:3': 1 CUDA device\(s\) visible, expected an index below 1"):
        device_module.as_device("cuda:3")


# -- on a GPU: the same kernels through CuPy --------------------------------------------------


@needs_gpu
def test_ops_and_gradients_on_cuda_match_cpu():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)
    results = {}
    for dev in ("cpu", "cuda"):
        x = flow.tensor(a, device=dev, requires_grad=True)
        w = flow.tensor(b, device=dev, requires_grad=True)
        y = flow.softmax(flow.tanh(x @ w) * 2 + 1, dim=-1).sum(0)
        y.sum().backward()
        assert y.device == flow.device(dev) and x.grad.device == flow.device(dev)
        results[dev] = (y.numpy(), x.grad.numpy(), w.grad.numpy())
    for got, ref in zip(results["cuda"], results["cpu"]):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


@needs_gpu
def test_training_on_cuda_matches_cpu():
    finals = {}
    for dev in ("cpu", "cuda"):
        flow.manual_seed(0)
        model = flow.nn.Sequential(flow.nn.Linear(4, 8), flow.nn.Tanh(), flow.nn.Linear(8, 2)).to(dev)
        opt = flow.optim.Adam(model.parameters(), lr=1e-2, amsgrad=True)
        loader = flow.utils.data.DataLoader(
            flow.utils.data.TensorDataset(flow.tensor(np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4)),
                                          flow.tensor(np.ones((8, 2), np.float32))), batch_size=4)
        for x, y in loader:
            opt.zero_grad()
            flow.nn.functional.mse_loss(model(x.to(dev)), y.to(dev)).backward()
            opt.step()
        assert opt.state[model[0].weight]["step"].device == flow.device(dev)
        finals[dev] = [p.numpy() for p in model.parameters()]
    for got, ref in zip(finals["cuda"], finals["cpu"]):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


@needs_gpu
def test_mixing_devices_names_the_op():
    with pytest.raises(DeviceError, match="expected all tensors on one device"):
        flow.ones(2, device="cuda") + flow.ones(2)
