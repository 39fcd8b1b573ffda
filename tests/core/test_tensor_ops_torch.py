"""Tensor ops against PyTorch: one line per case, forward values and dtypes, and gradients
of every float input (rtol 1e-5, atol 1e-5 * max|ref|, float32)."""

from __future__ import annotations

import numpy as np
import pytest

import flowserve as flow
from tests.precision import assert_close_in_format

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of these tests")


def ints(shape, low=0, high=5):
    return lambda rng: rng.integers(low, high, shape).astype(np.int64)


def bools(shape):
    return lambda rng: rng.random(shape) > 0.5


def pos(shape):
    return lambda rng: rng.uniform(0.5, 2.0, shape).astype(np.float32)


def typed(shape, dtype):
    return lambda rng: rng.integers(-4, 5, shape).astype(dtype)


def distinct(shape, n):
    """Int64 index along dim 0 with distinct rows per column (scatter without clashes)."""
    return lambda rng: np.stack([rng.permutation(n)[:shape[0]] for _ in range(shape[1])], 1).astype(np.int64)


def nograd(shape, make=None):
    """Float input that is data only (no gradient asked); ``make(rng)`` or standard normal."""
    def sample(rng):
        return make(rng) if make else rng.standard_normal(shape).astype(np.float32)

    sample.nograd = True
    return sample


def away(shape):
    return lambda rng: (rng.choice([-1.0, 1.0], shape) * rng.uniform(0.2, 2.0, shape)).astype(np.float32)


# (id, fn(m, *inputs) with m the module: flowserve or torch, input specs)
CASES = [
    # views and pieces
    ("view", lambda m, x: x.view(4, 6), [(2, 3, 4)]),
    ("reshape_infer", lambda m, x: x.reshape(-1, 3), [(2, 3, 4)]),
    ("permute", lambda m, x: x.permute(2, 0, 1), [(2, 3, 4)]),
    ("transpose", lambda m, x: x.transpose(0, 2), [(2, 3, 4)]),
    ("expand", lambda m, x: x.expand(2, 3, 4), [(3, 1)]),
    ("squeeze_dim", lambda m, x: x.squeeze(1), [(2, 1, 3)]),
    ("unsqueeze", lambda m, x: x.unsqueeze(-1), [(2, 3)]),
    ("flatten", lambda m, x: x.flatten(1), [(2, 3, 4)]),
    ("contiguous", lambda m, x: x.t().contiguous(), [(2, 3)]),
    ("chunk", lambda m, x: m.chunk(x, 3, dim=1), [(2, 7)]),
    ("split_size", lambda m, x: x.split(2, dim=0), [(5, 3)]),
    ("split_sections", lambda m, x: m.split(x, [1, 3, 1], 1), [(2, 5)]),
    ("stack", lambda m, a, b: m.stack([a, b], 1), [(2, 3), (2, 3)]),
    ("cat_promote", lambda m, a, b: m.cat([a, b], 0), [(2, 3), ints((1, 3))]),
    ("narrow", lambda m, x: x.narrow(1, 1, 2), [(3, 4)]),
    ("repeat", lambda m, x: x.repeat(2, 1, 3), [(3, 2)]),
    ("flip", lambda m, x: x.flip([0, 2]), [(2, 3, 4)]),
    ("roll", lambda m, x: m.roll(x, 2, 1), [(2, 5)]),
    ("unbind", lambda m, x: x.unbind(1), [(2, 3)]),
    # indexing
    ("basic_index", lambda m, x: x[1:, None, ::2, -1], [(3, 4, 5)]),
    ("int_list", lambda m, x: x[[2, 0, 2]], [(4, 3)]),
    ("tensor_index", lambda m, x, i: x[:, i], [(3, 5), ints((2, 2), -5, 5)]),
    ("two_adjacent", lambda m, x, i, j: x[:, i, j], [(2, 4, 5, 3), ints((3,), 0, 4), ints((3,), 0, 5)]),
    ("separated", lambda m, x, i, j: x[i, :, j], [(4, 3, 5), ints((2,), 0, 4), ints((2,), 0, 5)]),
    ("int_then_list", lambda m, x: x[0, :, [1, 2]], [(3, 4, 5)]),
    ("broadcast_idx", lambda m, x, i, j: x[i, j], [(4, 5), ints((3, 1), 0, 4), ints((2,), 0, 5)]),
    ("ellipsis_list", lambda m, x: x[..., [0, 2]], [(2, 3, 4)]),
    ("bool_mask", lambda m, x, b: x[b], [(3, 4), bools((3, 4))]),
    ("bool_rows", lambda m, x, b: x[b], [(4, 3), bools((4,))]),
    ("index_select", lambda m, x, i: x.index_select(1, i), [(3, 5), ints((4,), 0, 5)]),
    ("gather", lambda m, x, i: x.gather(1, i), [(3, 4), ints((3, 6), 0, 4)]),
    ("gather_smaller", lambda m, x, i: m.gather(x, 0, i), [(4, 5), ints((2, 3), 0, 4)]),
    ("scatter", lambda m, x, i, s: x.scatter(0, i, s), [(4, 3), distinct((2, 3), 4), (2, 3)]),
    ("scatter_value", lambda m, x, i: x.scatter(0, i, 2.5), [(4, 3), distinct((2, 3), 4)]),
    ("scatter_big_src", lambda m, x, i, s: m.scatter(x, 0, i, s), [(4, 3), distinct((2, 2), 4), nograd((3, 3))]),
    ("scatter_add", lambda m, x, i, s: x.scatter_add(0, i, s), [(3, 4), ints((5, 4), 0, 3), (5, 4)]),
    ("index_add", lambda m, x, s: x.index_add(1, m.tensor([0, 2, 0]), s, alpha=2), [(3, 4), (3, 3)]),
    ("index_copy", lambda m, x, s: x.index_copy(0, m.tensor([3, 1]), s), [(4, 3), (2, 3)]),
    ("index_fill", lambda m, x: x.index_fill(1, m.tensor([1, 3]), -2.0), [(3, 4)]),
    ("where", lambda m, c, a, b: m.where(c, a, b), [bools((3, 4)), (3, 4), (4,)]),
    ("where_scalar", lambda m, c, a: m.where(c, a, 0.5), [bools((3, 1)), (3, 4)]),
    ("masked_fill", lambda m, x, b: x.masked_fill(b, -1.5), [(3, 4), bools((4,))]),
    ("masked_fill_int", lambda m, x, b: x.masked_fill(b, 7), [ints((3, 4)), bools((3, 4))]),
    # reductions
    ("sum_dims", lambda m, x: x.sum((0, 2), keepdim=True), [(2, 3, 4)]),
    ("sum_int32", lambda m, x: x.sum(), [typed((3, 4), np.int32)]),
    ("mean", lambda m, x: x.mean(-1), [(3, 4)]),
    ("var", lambda m, x: x.var(1), [(3, 5)]),
    ("var_biased", lambda m, x: m.var(x, 0, unbiased=False), [(4, 3)]),
    ("var_correction", lambda m, x: m.var(x, dim=None, correction=2), [(3, 5)]),
    ("std_keepdim", lambda m, x: x.std(0, keepdim=True), [(4, 3)]),
    ("max_dim", lambda m, x: x.max(1), [(3, 5)]),
    ("min_keepdim", lambda m, x: x.min(0, keepdim=True), [(4, 3)]),
    ("max_all", lambda m, x: x.max(), [(3, 4)]),
    ("max_pair", lambda m, a, b: a.max(b), [(3, 4), (4,)]),
    ("argmax", lambda m, x: x.argmax(1), [(3, 5)]),
    ("flow_max_dim", lambda m, x: m.max(x, 0, keepdim=True), [(3, 5)]),
    ("flow_min_all", lambda m, x: m.min(x), [(3, 5)]),
    ("any_all", lambda m, x: (m.any(x > 1), m.all(x > -1, 1), x.any(0)), [(4, 5)]),
    ("tril_triu", lambda m, x: (m.tril(x), x.triu(1), m.tril(x, -1)), [(2, 3, 4)]),
    ("argmin_flat", lambda m, x: x.argmin(), [(3, 5)]),
    ("prod", lambda m, x: x.prod(1), [(3, 4)]),
    ("prod_int", lambda m, x: x.prod(), [ints((5,), 1, 4)]),
    ("logsumexp", lambda m, x: m.logsumexp(x, 1), [(3, 5)]),
    ("logsumexp_keep", lambda m, x: x.logsumexp((0, 1), keepdim=True), [(3, 5)]),
    ("norm_2", lambda m, x: x.norm(), [(3, 4)]),
    ("norm_1_dim", lambda m, x: m.norm(x, p=1, dim=1), [away((3, 4))]),
    ("norm_inf", lambda m, x: m.norm(x, p=float("inf"), dim=0), [(3, 4)]),
    ("norm_3", lambda m, x: x.norm(p=3, dim=-1, keepdim=True), [(3, 4)]),
    ("norm_zero_row", lambda m, x: (x * m.tensor([[0.0], [1.0]])).norm(dim=1), [(2, 3)]),
    ("norm_fro", lambda m, x: m.norm(x, "fro", dim=(0, 1)), [(3, 4)]),
    ("cumsum", lambda m, x: x.cumsum(1), [(3, 4)]),
    ("cumsum_int", lambda m, x: m.cumsum(x, 0), [typed((5,), np.int32)]),
    # elementwise math
    ("sin", lambda m, x: m.sin(x), [(3, 4)]),
    ("cos", lambda m, x: x.cos(), [(3, 4)]),
    ("tan", lambda m, x: m.tan(x), [(3, 4)]),
    ("erf", lambda m, x: m.erf(x), [(3, 4)]),
    ("erfc", lambda m, x: m.erfc(x), [(3, 4)]),
    ("log1p", lambda m, x: m.log1p(x), [pos((3, 4))]),
    ("expm1", lambda m, x: m.expm1(x), [(3, 4)]),
    ("log2", lambda m, x: m.log2(x), [pos((3,))]),
    ("log10", lambda m, x: x.log10(), [pos((3,))]),
    ("floor", lambda m, x: m.floor(x * 3), [(3, 4)]),
    ("ceil", lambda m, x: x.mul(3).ceil(), [(3, 4)]),
    ("round", lambda m, x: m.round(x * 3), [(3, 4)]),
    ("round_decimals", lambda m, x: m.round(x, decimals=2), [(3, 4)]),
    ("trunc", lambda m, x: m.trunc(x * 3), [(3, 4)]),
    ("frac", lambda m, x: m.frac(x * 3), [(3, 4)]),
    ("remainder", lambda m, a, b: m.remainder(a * 4, b), [(3, 4), away((4,))]),
    ("remainder_int", lambda m, a: a % 3, [ints((3, 4), -9, 9)]),
    ("fmod", lambda m, a, b: m.fmod(a * 4, b), [(3, 4), away((4,))]),
    ("floor_divide", lambda m, a, b: m.floor_divide(a * 4, b), [nograd((3, 4)), nograd((4,), away((4,)))]),
    ("floor_divide_int", lambda m, a: a // -2, [ints((3, 4), -9, 9)]),
    ("div_trunc", lambda m, a: m.div(a, 2, rounding_mode="trunc"), [ints((5,), -9, 9)]),
    ("div_floor", lambda m, a, b: m.div(a * 4, b, rounding_mode="floor"), [(3,), away((3,))]),
    ("reciprocal", lambda m, x: x.reciprocal(), [away((3, 4))]),
    ("true_div_int", lambda m, a, b: a / b, [ints((3,)), ints((3,), 1, 4)]),
    ("clamp", lambda m, x: x.clamp(-0.5, 0.5), [(3, 4)]),
    ("clamp_min_only", lambda m, x: m.clamp(x, min=0.1), [(3, 4)]),
    ("clamp_tensors", lambda m, x, lo, hi: m.clamp(x, lo, hi), [(3, 4), (4,) , pos((3, 1))]),
    ("clamp_int_float", lambda m, x: x.clamp(0.5, 2.5), [ints((3, 4))]),
    ("isnan", lambda m, x: m.isnan(x / x), [ints((6,), 0, 2)]),
    ("isinf", lambda m, x: m.isinf(1.0 / x), [ints((6,), 0, 2)]),
    ("isfinite", lambda m, x: m.isfinite(1.0 / x), [ints((6,), -1, 2)]),
    ("logical_and", lambda m, a, b: m.logical_and(a, b), [(3, 4), bools((4,))]),
    ("logical_or", lambda m, a, b: m.logical_or(a, b), [bools((3, 4)), bools((3, 4))]),
    ("logical_xor", lambda m, a, b: m.logical_xor(a, b), [ints((3, 4), 0, 2), bools((4,))]),
    ("logical_not", lambda m, a: m.logical_not(a), [ints((3, 4), 0, 2)]),
    ("bitwise_and", lambda m, a, b: a & b, [ints((3, 4), 0, 16), ints((4,), 0, 16)]),
    ("bitwise_or_bool", lambda m, a, b: a | b, [bools((3, 4)), bools((3, 4))]),
    ("bitwise_xor", lambda m, a, b: m.bitwise_xor(a, b), [ints((3,), 0, 16), ints((3,), 0, 16)]),
    ("bitwise_not", lambda m, a: ~a, [ints((3,), -8, 8)]),
    ("invert_bool", lambda m, a: ~a, [bools((3,))]),
    ("compare_mixed", lambda m, a, b: a < b, [(3, 4), ints((4,), -1, 2)]),
    ("eq_scalar", lambda m, a: a == 2, [ints((5,))]),
    ("pow_tensor", lambda m, a, b: a ** b, [pos((3, 4)), (4,)]),
    # products
    ("matmul", lambda m, a, b: a @ b, [(2, 1, 3, 4), (5, 4, 2)]),
    ("bmm", lambda m, a, b: m.bmm(a, b), [(2, 3, 4), (2, 4, 5)]),
    ("einsum_bmm", lambda m, a, b: m.einsum("bij,bjk->bik", a, b), [(2, 3, 4), (2, 4, 5)]),
    ("einsum_attn", lambda m, q, k: m.einsum("bhqd,bhkd->bhqk", q, k), [(2, 2, 3, 4), (2, 2, 5, 4)]),
    ("einsum_outer", lambda m, a, b: m.einsum("i,j->ij", a, b), [(3,), (4,)]),
    ("einsum_trace_free", lambda m, a: m.einsum("ij->j", a), [(3, 4)]),
    ("einsum_implicit", lambda m, a, b: m.einsum("ij,jk", a, b), [(3, 4), (4, 2)]),
    ("einsum_ellipsis", lambda m, a, b: m.einsum("...ij,...jk->...ik", a, b), [(2, 3, 4), (2, 4, 2)]),
    ("einsum_three", lambda m, a, b, c: m.einsum("ij,jk,kl->il", a, b, c), [(2, 3), (3, 4), (4, 5)]),
    ("einsum_private_sum", lambda m, a, b: m.einsum("ij,kj->k", a, b), [(3, 4), (2, 4)]),
    ("einsum_transpose", lambda m, a: m.einsum("ijk->kji", a), [(2, 3, 4)]),
    ("softmax", lambda m, x: x.softmax(1), [(3, 5)]),
    ("log_softmax", lambda m, x: m.log_softmax(x, 0), [(3, 5)]),
    # ordering
    ("topk", lambda m, x: x.topk(3, dim=1), [(4, 6)]),
    ("topk_smallest", lambda m, x: m.topk(x, 2, 0, largest=False), [(5, 3)]),
    ("sort", lambda m, x: x.sort(1), [(3, 5)]),
    ("sort_desc", lambda m, x: m.sort(x, 0, descending=True), [(5, 3)]),
    ("sort_stable_ties", lambda m, x: m.sort(x, dim=1, stable=True), [ints((3, 8), 0, 3)]),
    ("sort_desc_ties", lambda m, x: m.sort(x, dim=1, descending=True, stable=True), [ints((3, 8), 0, 3)]),
    ("argsort", lambda m, x: x.argsort(dim=0, descending=True), [(5, 3)]),
    # edge shapes
    ("zero_d_sum", lambda m, x: x.sum() * x, [()]),
    ("zero_d_broadcast", lambda m, a, b: a * b + a, [(), (2, 3)]),
    ("size_one_dims", lambda m, a, b: (a - b).abs().sum(1), [(3, 1), (1, 4)]),
    ("empty_cat", lambda m, a, b: m.cat([a, b], 0), [(0, 3), (2, 3)]),
    ("empty_sum", lambda m, x: x.sum(0), [(0, 3)]),
    ("zero_d_erf", lambda m, x: m.erf(x), [()]),
    ("zero_d_cumsum", lambda m, x: x.cumsum(0), [()]),
]


def _inputs(specs, rng):
    arrays = [s(rng) if callable(s) else rng.standard_normal(s).astype(np.float32) for s in specs]
    fs, ts = [], []
    for a, spec in zip(arrays, specs):
        grad = a.dtype.kind == "f" and not getattr(spec, "nograd", False)
        fs.append(flow.tensor(a, requires_grad=grad))
        ts.append(torch.tensor(a, requires_grad=grad))
    return fs, ts


def _leaves(out):
    if isinstance(out, (tuple, list)):
        return [leaf for o in out for leaf in _leaves(o)]
    return [out]


def _check(got, ref, what):
    ref_np = ref.detach().numpy() if isinstance(ref, torch.Tensor) else np.asarray(ref)
    got_np = got.numpy() if isinstance(got, flow.Tensor) else np.asarray(got)
    if isinstance(ref, torch.Tensor):
        assert got.dtype.name == str(ref.dtype).replace("torch.", ""), f"{what}: dtype {got.dtype} vs {ref.dtype}"
    assert got_np.shape == ref_np.shape, f"{what}: shape {got_np.shape} vs {ref_np.shape}"
    if ref_np.dtype.kind == "f":
        scale = max(1.0, float(np.nanmax(np.abs(ref_np)))) if ref_np.size else 1.0
        np.testing.assert_allclose(got_np, ref_np, rtol=1e-5, atol=1e-5 * scale, err_msg=what)
    else:
        np.testing.assert_array_equal(got_np, ref_np, err_msg=what)


@pytest.mark.parametrize("fn,specs", [pytest.param(fn, specs, id=name) for name, fn, specs in CASES])
def test_forward_and_backward_match_torch(fn, specs):
    rng = np.random.default_rng(0)
    fs, ts = _inputs(specs, rng)
    got, ref = _leaves(fn(flow, *fs)), _leaves(fn(torch, *ts))
    assert len(got) == len(ref)
    for i, (g, r) in enumerate(zip(got, ref)):
        _check(g, r, f"output {i}")
    float_outs = [(g, r) for g, r in zip(got, ref) if isinstance(r, torch.Tensor) and r.requires_grad]
    if not float_outs:
        return
    cotangents = [rng.standard_normal(tuple(r.shape)).astype(np.float32) for _, r in float_outs]
    sum((g * flow.tensor(c)).sum() for (g, _), c in zip(float_outs, cotangents)).backward()
    sum((r * torch.tensor(c)).sum() for (_, r), c in zip(float_outs, cotangents)).backward()
    for i, (f, t) in enumerate(zip(fs, ts)):
        if t.requires_grad:
            ref_grad = t.grad if t.grad is not None else torch.zeros_like(t)
            got_grad = f.grad if f.grad is not None else flow.zeros(*f.shape)
            _check(got_grad, ref_grad, f"gradient of input {i}")


# -- dtype promotion ------------------------------------------------------------------------------

DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]


def _pair(name, shape):
    return flow.ones(shape, dtype=getattr(flow, name)), torch.ones(shape, dtype=getattr(torch, name))


@pytest.mark.parametrize("a_shape,b_shape", [((3,), (3,)), ((), (3,)), ((3,), ()), ((), ())],
                         ids=["tensor-tensor", "0d-tensor", "tensor-0d", "0d-0d"])
def test_binary_promotion_table_matches_torch(a_shape, b_shape):
    wrong = []
    for a in DTYPES:
        for b in DTYPES:
            fa, ta = _pair(a, a_shape)
            fb, tb = _pair(b, b_shape)
            want = str((ta + tb).dtype).replace("torch.", "")
            if (fa + fb).dtype.name != want or flow.where(fa > 0, fa, fb).dtype.name != want:
                wrong.append(f"{a}+{b}: {(fa + fb).dtype.name}, torch {want}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("scalar", [True, 2, 2.5, -1], ids=["bool", "int", "float", "negative"])
def test_tensor_scalar_promotion_matches_torch(scalar):
    wrong = []
    for a in DTYPES:
        for shape in [(3,), ()]:
            fa, ta = _pair(a, shape)
            if a == "uint8" and scalar == -1:
                continue  # PyTorch refuses the overflow
            pairs = [(fa * scalar, ta * scalar, "mul"), (scalar + fa, scalar + ta, "radd"),
                     (fa / scalar, ta / scalar, "div"), (fa < scalar, ta < scalar, "lt")]
            for f_out, t_out, op in pairs:
                want = str(t_out.dtype).replace("torch.", "")
                if f_out.dtype.name != want:
                    wrong.append(f"{a}{list(shape)} {op} {scalar!r}: {f_out.dtype.name}, torch {want}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("op", ["sum", "prod", "cumsum", "mean_float", "abs", "neg", "floor", "argmax"])
def test_unary_result_dtypes_match_torch(op):
    fns = {"sum": lambda m, x: x.sum(), "prod": lambda m, x: x.prod(), "cumsum": lambda m, x: x.cumsum(0),
           "mean_float": lambda m, x: x.float().mean(), "abs": lambda m, x: x.abs(), "neg": lambda m, x: -x,
           "floor": lambda m, x: m.floor(x), "argmax": lambda m, x: x.argmax()}
    for name in DTYPES:
        if name == "bool" and op in ("neg", "abs", "floor", "argmax"):
            continue
        fa, ta = _pair(name, (3,))
        assert fns[op](flow, fa).dtype.name == str(fns[op](torch, ta).dtype).replace("torch.", ""), name


# -- ops on every dtype ------------------------------------------------------------------------------

DTYPE_OPS = [
    ("add_mul", lambda m, a, b: a + b * 2, DTYPES[1:]),
    ("compare_where", lambda m, a, b: m.where(a > b, a, b), DTYPES[1:]),
    ("sum_dim", lambda m, a, b: a.sum(0), DTYPES),
    ("cumsum", lambda m, a, b: a.cumsum(1), DTYPES[1:]),
    ("max_dim", lambda m, a, b: a.max(1), DTYPES[1:]),
    ("sort", lambda m, a, b: m.sort(a, dim=1, stable=True), DTYPES[1:]),
    ("topk_values", lambda m, a, b: a.topk(2, 1).values, DTYPES[1:]),  # tied indices may differ
    ("gather", lambda m, a, b: a.gather(1, m.tensor([[0, 2], [1, 1], [3, 0]])), DTYPES),
    ("index", lambda m, a, b: a[m.tensor([2, 0]), 1:], DTYPES),
    ("cat_stack", lambda m, a, b: m.stack([a, b]).flip(0), DTYPES),
    ("clamp", lambda m, a, b: a.clamp(-1, 2), DTYPES[2:]),
    ("floor_div_mod", lambda m, a, b: (a // 3, a % 3), DTYPES[1:]),
    ("abs_neg", lambda m, a, b: (-a).abs(), DTYPES[2:]),
    ("masked_fill", lambda m, a, b: a.masked_fill(a > 0, 1), DTYPES),
    ("float_math", lambda m, a, b: (m.erf(a), m.sin(a), a.exp()), ["float16", "bfloat16", "float64"]),
    ("int_to_float_math", lambda m, a, b: (m.erf(a), m.sqrt(a.abs())), ["uint8", "int8", "int32", "int64"]),
]


@pytest.mark.parametrize("fn,names", [pytest.param(fn, names, id=op) for op, fn, names in DTYPE_OPS])
def test_ops_on_every_dtype_match_torch(fn, names):
    data = np.random.default_rng(5).integers(-3, 4, (2, 3, 4)).astype(np.float64)
    for name in names:
        fa, fb = (flow.tensor(d, dtype=getattr(flow, name)) for d in data[:, :3, :])
        ta, tb = (torch.tensor(d).to(getattr(torch, name)) for d in data[:, :3, :])
        got, ref = _leaves(fn(flow, fa, fb)), _leaves(fn(torch, ta, tb))
        for g, r in zip(got, ref):
            assert g.dtype.name == str(r.dtype).replace("torch.", ""), f"{name}: {g.dtype} vs {r.dtype}"
            got_np, ref_np = np.asarray(g.numpy(), np.float64), r.to(torch.float64).numpy()
            if r.dtype in (torch.float16, torch.bfloat16):  # each side rounds once: allow one step
                assert_close_in_format(got_np, ref_np, r.dtype, err_msg=name)
            else:
                np.testing.assert_allclose(got_np, ref_np, rtol=1e-6, atol=1e-6, err_msg=name)
