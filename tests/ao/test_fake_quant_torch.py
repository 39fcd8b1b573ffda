"""Fake quantization against PyTorch's (``torch.fake_quantize_*``, ``torch.ao.quantization.
FakeQuantize`` with moving-average observers): same scale, zero point, rounding (half to
even) and straight-through gradient mask."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.reference
import pytest
from onnxruntime.quantization.quant_utils import get_qmin_qmax_for_qType

import flowserve as flow
from flowserve.ao import quantization as Q
from flowserve.exporter.precision import REDUCE_RANGE
from flowserve.ops.fake_quant import fake_quant
from tests.precision import assert_close_in_format

torch = pytest.importorskip("torch")
from torch.ao import quantization as TQ  # noqa: E402


def _flow_fq(x, scale, zero_point, qmin, qmax, axis=None):
    xt = flow.tensor(x, requires_grad=True)
    y = fake_quant(xt, flow.tensor(scale), flow.tensor(zero_point.astype(np.float32)), quant_min=qmin,
                   quant_max=qmax, axis=axis)
    g = np.random.default_rng(1).standard_normal(x.shape).astype(np.float32)
    (y * flow.tensor(g)).sum().backward()
    return y.numpy(), xt.grad.numpy(), g


def _torch_grad(x, g, fn):
    xt = torch.tensor(x, requires_grad=True)
    y = fn(xt)
    (y * torch.tensor(g)).sum().backward()
    return y.detach().numpy(), xt.grad.numpy()


@pytest.mark.parametrize("qmin,qmax,zero_point", [(0, 255, 128), (0, 255, 3), (-128, 127, 0), (-64, 64, 0)])
def test_per_tensor_matches_torch(qmin, qmax, zero_point):
    rng = np.random.default_rng(abs(qmin) + zero_point)
    scale = np.float32(0.03125)  # a power of two: x below sits exactly on .5 ties
    ties = (np.arange(-300, 300, dtype=np.float32) + 0.5) * scale
    x = np.concatenate([ties, rng.uniform(-12, 12, 500).astype(np.float32)])
    y, grad, g = _flow_fq(x, np.array([scale], np.float32), np.array([zero_point]), qmin, qmax)
    ty, tgrad = _torch_grad(x, g, lambda t: torch.fake_quantize_per_tensor_affine(t, float(scale), zero_point,
                                                                                  qmin, qmax))
    assert_close_in_format(y, ty, "float32")
    assert_close_in_format(grad, tgrad, "float32")
    assert 0 < np.count_nonzero(tgrad) < x.size  # both the inside and the clamped parts are exercised


@pytest.mark.parametrize("axis", [0, 1])
def test_per_channel_matches_torch(axis):
    rng = np.random.default_rng(axis)
    x = rng.uniform(-3, 3, (4, 6, 3, 3)).astype(np.float32)
    channels = x.shape[axis]
    scale = rng.uniform(0.005, 0.05, channels).astype(np.float32)
    zero_point = rng.integers(-4, 5, channels)
    y, grad, g = _flow_fq(x, scale, zero_point, -64, 64, axis=axis)
    ty, tgrad = _torch_grad(x, g, lambda t: torch.fake_quantize_per_channel_affine(
        t, torch.tensor(scale), torch.tensor(zero_point, dtype=torch.int32), axis, -64, 64))
    assert_close_in_format(y, ty, "float32")
    assert_close_in_format(grad, tgrad, "float32")


def _torch_activation_fq(**kwargs):
    """PyTorch's activation fake-quantizer of ``default_qconfig()`` (``kwargs``: what PyTorch's
    QAT modules pass when they make one from a ``QConfig``)."""
    return TQ.FakeQuantize(observer=TQ.MovingAverageMinMaxObserver, quant_min=0, quant_max=255,
                           dtype=torch.quint8, qscheme=torch.per_tensor_affine, averaging_constant=0.01, **kwargs)


def _torch_weight_fq(**kwargs):
    return TQ.FakeQuantize(observer=TQ.MovingAveragePerChannelMinMaxObserver, quant_min=-64, quant_max=64,
                           dtype=torch.qint8, qscheme=torch.per_channel_symmetric, ch_axis=0,
                           averaging_constant=1.0, **kwargs)


@pytest.mark.parametrize("kind", ["activation", "weight"])
def test_fake_quantize_module_matches_torch_over_calls(kind):
    """Five training calls: the observer's running range, scale and zero point, the output
    and the gradient, call after call."""
    qconfig = Q.default_qconfig()
    spec = qconfig.activation if kind == "activation" else qconfig.weight
    shape = (8, 3, 5, 5)
    ours = Q.FakeQuantize(spec, channels=shape[0])
    theirs = _torch_activation_fq() if kind == "activation" else _torch_weight_fq()
    rng = np.random.default_rng(7)
    for step in range(5):
        x = (rng.standard_normal(shape) * (1 + step) + 0.3 * step).astype(np.float32)
        g = rng.standard_normal(shape).astype(np.float32)
        xt = flow.tensor(x, requires_grad=True)
        (ours(xt) * flow.tensor(g)).sum().backward()
        ty, tgrad = _torch_grad(x, g, theirs)
        fy = fake_quant(flow.tensor(x), ours.scale, ours.zero_point, quant_min=spec.quant_min,
                        quant_max=spec.quant_max, axis=0 if spec.per_channel else None).numpy()
        assert_close_in_format(ours.scale.numpy(), theirs.scale.numpy(), "float32", err_msg=f"scale, call {step}")
        np.testing.assert_array_equal(ours.zero_point.numpy(), theirs.zero_point.numpy().astype(np.float32))
        assert_close_in_format(fy, ty, "float32", err_msg=f"output, call {step}")
        assert_close_in_format(xt.grad.numpy(), tgrad, "float32", err_msg=f"gradient, call {step}")


def test_weight_range_is_the_int8_exports():
    """QAT trains for the 7-bit weights ``flowserve export --precision int8`` writes."""
    qmin, qmax = get_qmin_qmax_for_qType(onnx.TensorProto.INT8, reduce_range=REDUCE_RANGE, symmetric=True)
    assert (int(qmin), int(qmax)) == Q.WEIGHT_QUANT_RANGE


def test_frozen_observer_keeps_its_scale():
    fq = Q.FakeQuantize(Q.default_qconfig().activation, freeze_observer_after=2)
    for step in range(4):
        fq(flow.tensor(np.full((3, 4), 2.0 + 10 * step, np.float32)))
    assert float(fq.observed) == 2.0
    np.testing.assert_allclose(fq.max_val.numpy(), [12.0 * 0.01 + 2.0 * 0.99], rtol=1e-6)


def test_bad_spec_is_refused():
    with pytest.raises(ValueError, match="quant_min <= 0 <= quant_max"):
        Q.FakeQuantSpec(1, 255)
    with pytest.raises(ValueError, match="channel count"):
        Q.FakeQuantize(Q.default_qconfig().weight)


class _FakeQuantGraph(flow.nn.Graph):
    def build(self, x, scale, zero_point):
        return fake_quant(x, scale, zero_point, quant_min=0, quant_max=255)


def test_eager_graph_and_export_round_ties_alike():
    """Values of one grid quantized onto another (an activation quantized again by the next
    layer) sit next to .5 ties, where ``round(x / s)`` and PyTorch's ``round(x * (1 / s))``
    part by a step: eager mode, a graph whose observers feed the scale, and the exported
    QDQ model (``QuantizeLinear``, constant scale) must all give the first."""
    rng = np.random.default_rng(0)
    graph, differing = _FakeQuantGraph(), 0
    for _ in range(12):
        scale = np.array([rng.uniform(0.001, 0.1)], np.float32)
        levels = int(rng.integers(2, 255))
        x = (np.arange(256, dtype=np.float32) * np.float32(255.0 / levels) * scale[0]).astype(np.float32)
        divided = np.clip(np.rint(x / scale), 0, 255)
        differing += int(np.count_nonzero(divided != np.clip(np.rint(x * (np.float32(1) / scale)), 0, 255)))
        args = [flow.tensor(x), flow.tensor(scale), flow.tensor(np.zeros(1, np.float32))]
        exported = onnx.reference.ReferenceEvaluator(onnx.helper.make_model(onnx.helper.make_graph(
            [onnx.helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"])], "q",
            [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [None])],
            [onnx.helper.make_tensor_value_info("q", onnx.TensorProto.UINT8, [None])],
            [onnx.numpy_helper.from_array(scale[0], "s"), onnx.numpy_helper.from_array(np.uint8(0), "z")]),
            opset_imports=[onnx.helper.make_opsetid("", 17)])).run(None, {"x": x})[0]
        np.testing.assert_array_equal(exported, divided)
        np.testing.assert_array_equal(fake_quant(*args, quant_min=0, quant_max=255).numpy(), divided * scale[0])
        np.testing.assert_array_equal(graph(*args).numpy(), divided * scale[0])
    assert differing > 0  # the two roundings part somewhere in these inputs
