"""Walk the op registry: every primitive has its facets, matches finite differences and
runs the same in ONNX Runtime as in its kernel."""

from __future__ import annotations

import numpy as np
import pytest

import flowserve as flow
from flowserve import dtypes
from flowserve.errors import ExportError
from flowserve.ir.graph import GraphIR, Node, Value
from flowserve.onnx_backend.lower import lower_ir
from flowserve.onnx_backend.lowering import LOWERINGS, lowering
from flowserve.onnx_backend.lowering.attention import lower_ort_multi_head_attention
from flowserve.onnx_backend.lowering.graph_mode import lower_add_to_output
from flowserve.onnx_backend.lowering.norm import lower_batch_norm_backward
from flowserve.onnx_backend.providers import create_session
from flowserve.ops.registry import REGISTRY, infer_meta
from tests.core.op_cases import all_cases

CASES = all_cases()
PARAMS = [pytest.param(name, i, id=f"{name}-{case.id or i}") for name, cases in sorted(CASES.items())
          for i, case in enumerate(cases)]


def test_every_primitive_has_every_facet():
    missing = []
    for name, prim in sorted(REGISTRY.items()):
        if prim.differentiable and prim.vjp is None:
            missing.append(f"{name}: vjp")
        if prim not in LOWERINGS:
            missing.append(f"{name}: ONNX lowering")
        if not CASES.get(name):
            missing.append(f"{name}: op case (tests/core/op_cases)")
    assert not missing, "primitives lacking a facet:\n" + "\n".join(missing)


def test_lowerings_are_keyed_by_the_registered_primitives():
    """Every lowering is registered for a declared primitive object, and an IR node's op
    name finds it through the op registry."""
    assert all(REGISTRY.get(prim.name) is prim for prim in LOWERINGS)
    assert all(LOWERINGS.for_op(name) is not None for name, prim in REGISTRY.items() if prim in LOWERINGS)
    assert "fused.AddToOutput" not in REGISTRY and "fused.AddToOutput" not in {p.name for p in LOWERINGS}


def test_one_lookup_finds_every_lowering_in_one_order():
    """``for_op`` is the one lookup: the caller's extra lowerings (the exporter's fused
    groups) first, then the primitive's, then graph mode's fused nodes' (registered by name)."""
    assert LOWERINGS.for_op("fused.AddToOutput") is lower_add_to_output
    assert LOWERINGS.for_op("fused.BatchNormBackward") is lower_batch_norm_backward
    assert LOWERINGS.for_op("fused.MultiHeadAttention") is lower_ort_multi_head_attention
    assert LOWERINGS.for_op("fused.NoSuchNode") is None

    def mine(b, node, ctx):
        return None

    assert LOWERINGS.for_op("fused.MultiHeadAttention", {"fused.MultiHeadAttention": mine}) is mine
    assert LOWERINGS.for_op("add", {"add": mine}) is mine
    assert LOWERINGS.for_op("add", {"fused.Gemm": mine}) is LOWERINGS.for_op("add") is not None


def test_a_fused_node_lowering_is_registered_by_a_name_no_primitive_has_once():
    with pytest.raises(ExportError, match="'add' is a primitive"):
        LOWERINGS.register_fused("add", lambda b, node, ctx: None)
    with pytest.raises(ExportError, match="'fused.AddToOutput' is registered twice"):
        LOWERINGS.register_fused("fused.AddToOutput", lambda b, node, ctx: None)


def test_a_lowering_is_registered_for_a_primitive_once():
    with pytest.raises(ExportError, match="for a Primitive, got 'add'"):
        lowering("add")(lambda b, node, ctx: None)
    with pytest.raises(ExportError, match="'add' is registered twice"):
        lowering(REGISTRY["add"])(lambda b, node, ctx: None)


def _tensors(arrays, dtype):
    return [flow.tensor(a, dtype=dtype) if a.dtype.kind == "f" else flow.tensor(a) for a in arrays]


def _call(name, tensors, attrs):
    out = REGISTRY[name](*tensors, **attrs)
    return out if isinstance(out, tuple) else (out,)


@pytest.mark.parametrize("name,index", PARAMS)
def test_finite_differences(name, index):
    prim, case = REGISTRY[name], CASES[name][index]
    if not prim.differentiable or not case.grad:
        pytest.skip("not differentiable")
    rng = np.random.default_rng(index)
    arrays = case.arrays(rng)
    float_inputs = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"]
    xs = _tensors(arrays, flow.float64)
    for i in float_inputs:
        xs[i].requires_grad = True
    outs = _call(name, xs, case.attrs)
    cotangents = [rng.standard_normal(tuple(o.shape)) for o in outs]

    def objective(arrs):
        with flow.no_grad():
            res = _call(name, _tensors(arrs, flow.float64), case.attrs)
        return sum(float((r.numpy().astype(np.float64) * c).sum()) for r, c in zip(res, cotangents)
                   if r.dtype.is_floating_point)

    total = sum((o * flow.tensor(c, dtype=flow.float64)).sum() for o, c in zip(outs, cotangents)
                if o.dtype.is_floating_point)
    total.backward()
    eps = 1e-6
    for i in float_inputs:
        numeric = np.zeros_like(arrays[i])
        for j in np.ndindex(arrays[i].shape):
            plus, minus = [a.copy() for a in arrays], [a.copy() for a in arrays]
            plus[i][j] += eps
            minus[i][j] -= eps
            numeric[j] = (objective(plus) - objective(minus)) / (2 * eps)
        analytic = xs[i].grad.numpy()
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=case.tol * max(1.0, np.abs(numeric).max()),
                                   err_msg=f"{name} gradient of input {i}")


def _one_node_model(name, arrays, attrs):
    ir = GraphIR(f"op_{name}")
    names = []
    metas = []
    for i, a in enumerate(arrays):
        v = ir.add_value(Value(f"in{i}", a.shape, dtypes.from_numpy(a.dtype).name))
        ir.inputs.append(v)
        names.append(v.name)
        metas.append(flow.ops.Meta(a.shape, dtypes.from_numpy(a.dtype)))
    out_metas = infer_meta(REGISTRY[name], metas, attrs)
    outs = [ir.add_value(Value(f"out{i}", tuple(m.shape), m.dtype.name)) for i, m in enumerate(out_metas)]
    ir.nodes.append(Node(name, names, [v.name for v in outs], dict(attrs)))
    ir.outputs = outs
    return lower_ir(ir, {})


@pytest.mark.parametrize("name,index", PARAMS)
def test_onnx_runtime_parity(name, index):
    case = CASES[name][index]
    rng = np.random.default_rng(100 + index)
    arrays = [a.astype(np.float32) if a.dtype.kind == "f" else a for a in case.arrays(rng)]
    _check_lowering_on_onnx_runtime(name, arrays, case.attrs, rtol=1e-5)


def _check_lowering_on_onnx_runtime(name: str, arrays: list, attrs: dict, rtol: float, device: str = "cpu") -> None:
    """The primitive's one-node ONNX model on ONNX Runtime gives the kernel's dtypes, shapes
    and values (floats within ``rtol``, scaled by the largest magnitude; others exactly);
    the kernel runs on ``device`` and the session on that device's provider."""
    expected = [o.numpy() for o in _call(name, [flow.tensor(a, device=device) for a in arrays], attrs)]
    session = create_session(_one_node_model(name, arrays, attrs), device=device)
    got = session.run(None, {f"in{i}": a for i, a in enumerate(arrays)})
    for e, g in zip(expected, got):
        assert g.dtype == e.dtype and g.shape == e.shape, f"{name}: ORT gave {g.shape} {g.dtype}, kernel {e.shape} {e.dtype}"
        if e.dtype.kind == "f":
            np.testing.assert_allclose(g, e, rtol=rtol, atol=rtol * max(1.0, np.abs(e).max()))
        else:
            np.testing.assert_array_equal(g, e)


def _has_float_input(param) -> bool:
    name, index = param.values
    return any(a.dtype.kind == "f" for a in CASES[name][index].arrays(np.random.default_rng(0)))


@pytest.mark.parametrize("name,index", [p for p in PARAMS if _has_float_input(p)])
def test_onnx_runtime_parity_float64(name, index):
    """Every primitive's lowering runs in float64 and keeps float64's precision, where ONNX
    Runtime has no double kernel too (Conv, ConvTranspose, Erf, LSTM, GRU, RNN)."""
    case = CASES[name][index]
    arrays = case.arrays(np.random.default_rng(100 + index))  # float inputs are float64
    _check_lowering_on_onnx_runtime(name, arrays, case.attrs, rtol=1e-12)
