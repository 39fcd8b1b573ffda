"""Eager ops on a CUDA GPU: the op registry walked on "cuda" (CuPy arrays) against the CPU.

For every case of ``tests/core/op_cases`` (the table ``tests/core/test_registry.py`` walks on
the CPU): the forward on "cuda" equals the forward on "cpu", so do the gradients of a random
cotangent, the outputs are CuPy arrays on ``cuda:0``, and the op's ONNX lowering run by ONNX
Runtime's CUDA provider equals the eager kernel on "cuda". Each case is its own test, so one
run names every op that fails on the GPU.

Run on a machine with a GPU, CuPy and onnxruntime's CUDA provider::

    python3 -m pytest -q -p no:cacheprovider -rs -m gpu tests/gpu/test_eager_cuda.py

Most of the time goes to CuPy compiling each kernel on first use (cached on disk after);
with pytest-xdist, ``-n 8`` compiles in parallel and survives a crashing worker. Without a
GPU and CuPy every test here skips with the reason (the ONNX Runtime ones also without
onnxruntime's CUDA provider).
"""

from __future__ import annotations

from types import MappingProxyType

import numpy as np
import pytest

import flowserve as flow
from flowserve import dtypes
from flowserve.device import array_module
from flowserve.errors import DeviceError
from flowserve.ops.registry import REGISTRY, Meta, infer_meta
from tests.core.test_registry import CASES, PARAMS, _call, _check_lowering_on_onnx_runtime
from tests.gpu import needs_cupy, needs_ort_cuda

pytestmark = pytest.mark.gpu

CUDA = flow.device("cuda:0")

# Float64 on both devices: the GPU sums, multiplies and reduces in another order, and its
# libm differs from the CPU's by an ulp or two; with the cases' small shapes that stays
# many orders of magnitude under this bound, which an actual kernel bug exceeds.
RTOL = 1e-9

# Primitives whose kernel runs on the CPU by design, name -> why; every other primitive runs
# its kernel on "cuda". None today: the collectives, whose communicators take host arrays,
# copy a GPU operand to the host and the result back inside their kernels.
CPU_ONLY = MappingProxyType({})


def _inputs(arrays, device, requires_grad: bool = False) -> list:
    """Tensors of ``arrays`` on ``device``: floats as float64, the rest in their own dtype."""
    out = []
    for a in arrays:
        is_float = a.dtype.kind == "f"
        t = flow.tensor(a, dtype=flow.float64 if is_float else None, device=device)
        if requires_grad and is_float:
            t.requires_grad = True
        out.append(t)
    return out


def _run(name: str, index: int, device, requires_grad: bool = False):
    """The case's inputs and outputs on ``device``; the default generator is seeded first,
    so random kernels that draw from it give the same numbers on both devices."""
    arrays = CASES[name][index].arrays(np.random.default_rng(index))
    xs = _inputs(arrays, device, requires_grad)
    flow.manual_seed(1000 + index)
    return xs, _call(name, xs, CASES[name][index].attrs)


def _assert_close(got: np.ndarray, expected: np.ndarray, what: str) -> None:
    assert got.dtype == expected.dtype and got.shape == expected.shape, (
        f"{what}: cuda gave {got.shape} {got.dtype}, cpu {expected.shape} {expected.dtype}")
    if expected.dtype.kind in "fc":
        finite = np.abs(expected[np.isfinite(expected)])  # infinities and NaNs must match exactly
        scale = max(1.0, float(finite.max())) if finite.size else 1.0
        np.testing.assert_allclose(got, expected, rtol=RTOL, atol=RTOL * scale, err_msg=what)
    else:
        np.testing.assert_array_equal(got, expected, err_msg=what)


def _result_device(name: str, attrs: dict):
    """Where the primitive's outputs live when its inputs are on "cuda"."""
    prim = REGISTRY[name]
    return CUDA if prim.result_device is None else flow.device(str(prim.result_device(**attrs)))


def _gpu_params():
    return [p for p in PARAMS if p.values[0] not in CPU_ONLY]


def test_every_primitive_is_walked_on_cuda_or_listed_as_cpu_only():
    walked = {p.values[0] for p in _gpu_params()}
    assert set(CPU_ONLY) <= set(REGISTRY), f"CPU-only but not primitives: {set(CPU_ONLY) - set(REGISTRY)}"
    assert walked | set(CPU_ONLY) == set(REGISTRY), f"neither walked nor CPU-only: {set(REGISTRY) - walked - set(CPU_ONLY)}"


@needs_cupy
@pytest.mark.parametrize("name,index", _gpu_params())
def test_forward_on_cuda_equals_cpu(name, index):
    _, expected = _run(name, index, "cpu")
    _, got = _run(name, index, CUDA)
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        _assert_close(g.numpy(), e.numpy(), f"{name} output {i}")


@needs_cupy
@pytest.mark.parametrize("name,index", _gpu_params())
def test_outputs_are_cupy_arrays_on_the_device(name, index):
    cupy_array = array_module(CUDA).ndarray  # the array a tensor holds is its ``_data``
    where = _result_device(name, CASES[name][index].attrs)
    _, outs = _run(name, index, CUDA)
    for i, o in enumerate(outs):
        assert o.device == where, f"{name} output {i} is on {o.device}, expected {where}"
        if where.type == "cuda":
            assert isinstance(o._data, cupy_array), f"{name} output {i} holds a {type(o._data).__name__}"
            assert o._data.device.id == where.index, f"{name} output {i} is on GPU {o._data.device.id}"
        else:
            assert isinstance(o._data, np.ndarray), f"{name} output {i} holds a {type(o._data).__name__}"


def _gradients(name: str, index: int, device) -> list:
    """Gradients of ``sum(output * cotangent)`` for the case's float inputs, as numpy."""
    xs, outs = _run(name, index, device, requires_grad=True)
    rng = np.random.default_rng(500 + index)
    total = None
    for o in outs:
        if o.dtype.is_floating_point:
            cotangent = flow.tensor(rng.standard_normal(tuple(o.shape)), dtype=o.dtype, device=o.device)
            term = (o * cotangent).sum()
            total = term if total is None else total + term
    total.backward()
    return [None if x.grad is None else x.grad.numpy() for x in xs if x.requires_grad]


def _grad_params():
    out = []
    for p in _gpu_params():
        name, index = p.values
        case = CASES[name][index]
        arrays = case.arrays(np.random.default_rng(index))
        metas = [Meta(a.shape, flow.float64 if a.dtype.kind == "f" else dtypes.from_numpy(a.dtype)) for a in arrays]
        float_out = any(m.dtype.is_floating_point for m in infer_meta(REGISTRY[name], metas, case.attrs))
        if REGISTRY[name].differentiable and float_out and any(a.dtype.kind == "f" for a in arrays):
            out.append(p)
    return out


@needs_cupy
@pytest.mark.parametrize("name,index", _grad_params())
def test_gradients_on_cuda_equal_cpu(name, index):
    expected = _gradients(name, index, "cpu")
    got = _gradients(name, index, CUDA)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert (g is None) == (e is None), f"{name}: float input {i} has a gradient on one device only"
        if e is not None:
            _assert_close(g, e, f"{name} gradient of float input {i}")


@needs_cupy
@needs_ort_cuda
@pytest.mark.parametrize("name,index", _gpu_params())
def test_onnx_lowering_on_the_cuda_provider_equals_the_cuda_kernel(name, index):
    case = CASES[name][index]
    rng = np.random.default_rng(100 + index)
    arrays = [a.astype(np.float32) if a.dtype.kind == "f" else a for a in case.arrays(rng)]
    _check_lowering_on_onnx_runtime(name, arrays, case.attrs, rtol=1e-5, device="cuda")


# -- index tensors made with numpy land on the indexed tensor's device ------------------------


def _both(fn, *arrays):
    """``fn`` of tensors over ``arrays`` on the CPU and on the GPU: (cpu result, cuda result)."""
    cpu = fn(*[flow.tensor(a) for a in arrays])
    cuda = fn(*[flow.tensor(a, device=CUDA) for a in arrays])
    return cpu, cuda


def _flat(result) -> list:
    if isinstance(result, flow.Tensor):
        return [result]
    return [t for part in result for t in _flat(part)]


def _frozen(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


ROWS = _frozen(np.arange(12.0).reshape(4, 3) * 0.5 - 2.0)
INDEX = _frozen(np.array([[3, 0, 1], [1, 2, 0]], dtype=np.int64))
ORDER = _frozen(np.array([2, 0, 3], dtype=np.int64))
MASK = _frozen(ROWS > 0)

# case -> (function of tensors, the numpy arrays the tensors are made of)
INDEXING = MappingProxyType({
    "gather": (lambda t, i: flow.gather(t, 0, i), ROWS, INDEX),
    "index_select": (lambda t, i: flow.index_select(t, 0, i), ROWS, ORDER),
    "scatter": (lambda t, i: flow.scatter(t, 0, i, t[:2, :2]), ROWS, np.array([[3, 0], [1, 2]])),
    "scatter_add": (lambda t, i: flow.scatter_add(t, 0, i, flow.ones_like(t)[:2]), ROWS, INDEX),
    "embedding": (lambda t, i: flow.nn.functional.embedding(i, t), ROWS, INDEX),
    "argmax": (lambda t: flow.argmax(t, dim=1), ROWS),
    "max-with-indices": (lambda t: flow.max(t, dim=0), ROWS),
    "one_hot": (lambda i: flow.nn.functional.one_hot(i, 4), INDEX),
    "one_hot-counted": (lambda i: flow.nn.functional.one_hot(i), INDEX),
    "nonzero": (lambda t: flow.nonzero(t > 0), ROWS),
    "nonzero-tuple": (lambda t: flow.nonzero(t > 0, as_tuple=True), ROWS),
    "topk": (lambda t: flow.topk(t, 2, dim=1), ROWS),
    "sort": (lambda t: flow.sort(t, dim=0, descending=True), ROWS),
    "argsort": (lambda t: flow.argsort(t, dim=1), ROWS),
    "where": (lambda t, m: flow.where(m, t, -t), ROWS, MASK),
    "where-numpy-mask": (lambda t: flow.where(MASK, t, 0.5), ROWS),
    "masked_fill": (lambda t, m: t.masked_fill(m, 7.0), ROWS, MASK),
    "masked_fill-numpy-mask": (lambda t: t.masked_fill(MASK, 7.0), ROWS),
    "masked_select": (lambda t, m: flow.masked_select(t, m), ROWS, MASK),
    "flip": (lambda t: flow.flip(t, [0, 1]), ROWS),
    "roll": (lambda t: flow.roll(t, 1, 0), ROWS),
    "tril": (lambda t: flow.tril(t), ROWS),
    "triu": (lambda t: flow.triu(t, 1), ROWS),
    "getitem-index-tensor": (lambda t, i: t[i], ROWS, ORDER),
    "getitem-two-index-tensors": (lambda t, i: t[i, i], ROWS, np.array([0, 2], dtype=np.int64)),
    "getitem-bool-tensor": (lambda t, m: t[m], ROWS, MASK),
    "getitem-numpy-array": (lambda t: t[ORDER], ROWS),
    "getitem-list": (lambda t: t[[1, -1], 1:], ROWS),
    "getitem-numpy-mask": (lambda t: t[MASK], ROWS),
    "setitem-numpy-array": (lambda t: _set(t, ORDER, 0.5), ROWS),
    "setitem-bool-tensor": (lambda t, m: _set(t, m, -1.0), ROWS, MASK),
})


def _set(t, key, value):
    t = t.clone()
    t[key] = value
    return t


@needs_cupy
@pytest.mark.parametrize("case", sorted(INDEXING))
def test_index_tensors_made_with_numpy_land_on_the_tensors_device(case):
    fn, *arrays = INDEXING[case]
    cpu, cuda = _both(fn, *arrays)
    cpu, cuda = _flat(cpu), _flat(cuda)
    assert len(cpu) == len(cuda)
    for i, (c, g) in enumerate(zip(cpu, cuda)):
        assert g.device == CUDA, f"{case}: result {i} is on {g.device}"
        _assert_close(g.numpy(), c.numpy(), f"{case} result {i}")


@needs_cupy
def test_an_index_tensor_on_the_cpu_indexes_a_cuda_tensor():
    """As in PyTorch, a CPU index tensor may index a GPU tensor; the result is on the GPU."""
    t = flow.tensor(ROWS, device=CUDA)
    got = t[flow.tensor(ORDER)]
    assert got.device == CUDA
    _assert_close(got.numpy(), ROWS[ORDER], "t[cpu index]")
    t[flow.tensor(np.array([0, 3]))] = 0.0
    assert t.device == CUDA
    expected = ROWS.copy()
    expected[[0, 3]] = 0.0
    _assert_close(t.numpy(), expected, "t[cpu index] = 0")


@needs_cupy
def test_bfloat16_is_refused_on_the_gpu_with_a_clear_error():
    t = flow.tensor(ROWS, device=CUDA)
    with pytest.raises(DeviceError, match="CuPy has no bfloat16"):
        t.to(flow.bfloat16)
    with pytest.raises(DeviceError, match="CuPy has no bfloat16"):
        flow.tensor(ROWS, dtype=flow.bfloat16).to(CUDA)
