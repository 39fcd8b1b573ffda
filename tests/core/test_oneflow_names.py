"""OneFlow names that OneFlow code and OneFlow's own test suites use: ``flow.unittest``,
``F.depend``, ``F.rrelu`` / ``_C.rrelu``, ``reshape(shape=)``, ``Tensor.to(other)``,
``flow.sbp.broadcast()`` (graph-mode behaviour: tests/graph/test_graph_oneflow_names.py)."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap
import unittest

import numpy as np
import pytest

import flowserve as flow
import flowserve.nn.functional as F
import flowserve.unittest

torch = pytest.importorskip("torch", reason="PyTorch is the oracle of rrelu's evaluation form")


# -- flow.unittest ----------------------------------------------------------------------------


def _run_suite(case: type) -> unittest.TestResult:
    result = unittest.TestResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(case).run(result)
    return result


def test_unittest_skip_unless_runs_on_one_device_and_skips_the_others(monkeypatch):
    monkeypatch.delenv("ONEFLOW_TEST_DEVICE_NUM", raising=False)
    monkeypatch.delenv("ONEFLOW_TEST_NODE_NUM", raising=False)
    monkeypatch.delenv("ONEFLOW_TEST_NODE_LIST", raising=False)

    @flow.unittest.skip_unless_1n1d()
    class One(flow.unittest.TestCase):
        def test_it(self):
            self.assertEqual(flow.ones(2).sum().item(), 2.0)

    @flow.unittest.skip_unless_1n2d()
    class Two(flow.unittest.TestCase):
        def test_it(self):
            raise AssertionError("a 1n2d test ran on one device")

    assert issubclass(flow.unittest.TestCase, unittest.TestCase)
    one, two = _run_suite(One), _run_suite(Two)
    assert one.testsRun == 1 and not one.failures and not one.skipped
    assert [reason for _, reason in two.skipped] == ["only runs when node_size is 1 and device_num is 2"]


def test_unittest_env_reads_oneflow_test_variables(monkeypatch):
    env = flow.unittest.env
    monkeypatch.setenv("ONEFLOW_TEST_DEVICE_NUM", "4")
    monkeypatch.setenv("ONEFLOW_TEST_NODE_LIST", "host0,host1")
    monkeypatch.setenv("ONEFLOW_TEST_ENABLE_EAGER", "1")
    assert (env.device_num(), env.node_size(), env.node_list()) == (4, 2, ["host0", "host1"])
    assert env.eager_execution_enabled() and env.world_size() == flow.env.get_world_size() == 1

    @flow.unittest.skip_unless_2n4d()
    def needs_two_nodes_of_four():
        return "ran"

    assert needs_two_nodes_of_four() == "ran"
    monkeypatch.setenv("ONEFLOW_TEST_NODE_NUM", "x")
    with pytest.raises(ValueError, match="ONEFLOW_TEST_NODE_NUM must be an integer"):
        env.node_size()


def test_unittest_register_test_cases_filters_by_nodes(tmp_path):
    (tmp_path / "test_some.py").write_text(textwrap.dedent("""
        import flowserve as flow

        def test_one_node(self):
            self.assertTrue(True)

        @flow.unittest.num_nodes_required(2)
        def test_two_nodes(self):
            raise AssertionError("needs two nodes")
    """))
    scope = {}
    flow.unittest.register_test_cases(scope, str(tmp_path), lambda nodes: nodes == 1)
    result = _run_suite(scope["test_some"])
    assert result.testsRun == 1 and result.wasSuccessful()


def test_unittest_is_reachable_from_the_package_alone():
    code = "import flowserve as flow; print(flow.unittest.skip_unless_1n1d.__module__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "flowserve.unittest.cases"


# -- depend, rrelu ------------------------------------------------------------------------------


def test_depend_returns_its_input_and_checks_its_arguments():
    x = flow.randn(2, 3)
    assert F.depend(x, x * 2) is x
    assert F.depend(x, [x + 1, x - 1]) is x
    assert flow._C.depend is F.depend
    with pytest.raises(TypeError, match="depend expects tensors"):
        F.depend(x, 3)


def test_rrelu_eval_is_leaky_relu_with_the_mean_slope_as_torch():
    a = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    for lower, upper in [(1 / 8, 1 / 3), (0.1, 0.5)]:
        ours = F.rrelu(flow.tensor(a), lower, upper, training=False).numpy()
        ref = torch.nn.functional.rrelu(torch.tensor(a), lower, upper, training=False).numpy()
        np.testing.assert_allclose(ours, ref, rtol=1e-6)
    np.testing.assert_allclose(flow._C.rrelu(flow.tensor(a)).numpy(),
                               np.where(a > 0, a, a * (1 / 8 + 1 / 3) / 2), rtol=1e-6)


def test_rrelu_training_draws_a_slope_per_element_in_its_range():
    x = flow.tensor(-np.linspace(1.0, 2.0, 200, dtype=np.float32), requires_grad=True)
    y = F.rrelu(x, 0.1, 0.3, training=True)
    slope = y.detach().numpy() / x.detach().numpy()
    assert slope.min() >= 0.1 - 1e-6 and slope.max() <= 0.3 + 1e-6
    assert len(np.unique(np.round(slope, 6))) > 100  # one draw per element
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), slope, rtol=1e-5)  # the gradient is the drawn slope
    positive = flow.tensor([0.5, 2.0])
    assert F.rrelu(positive, training=True).tolist() == [0.5, 2.0]
    again = F.rrelu(x.detach(), 0.1, 0.3, training=True).numpy()
    assert not np.allclose(again, y.detach().numpy())  # new draws each call
    with pytest.raises(ValueError, match="lower <= upper"):
        F.rrelu(x, 0.5, 0.1, training=True)


def test_rrelu_inplace_writes_into_its_input():
    x = flow.tensor([-2.0, 1.0])
    out = F.rrelu_(x, 0.2, 0.2)
    assert out is x and x.tolist() == pytest.approx([-0.4, 1.0])


# -- reshape(shape=), Tensor.to(other), sbp ---------------------------------------------------------


def test_reshape_takes_oneflows_shape_keyword():
    x = flow.arange(6)
    assert flow.reshape(x, shape=(3, 2)).shape == (3, 2)
    assert x.reshape(shape=[2, -1]).tolist() == [[0, 1, 2], [3, 4, 5]]
    assert x.view(shape=(6, 1)).shape == (6, 1)
    assert x.reshape(3, 2).shape == x.reshape((3, 2)).shape == (3, 2)
    with pytest.raises(TypeError, match="takes the new shape once"):
        x.reshape(2, 3, shape=(3, 2))


def test_tensor_to_other_tensor_takes_its_dtype_and_device():
    x = flow.tensor([1.5, 2.5])
    other = flow.tensor([1], dtype=flow.int64)
    y = x.to(other)
    assert y.dtype == flow.int64 and y.device == other.device and y.tolist() == [1, 2]
    assert x.to(flow.zeros(1, dtype=flow.float64)).dtype == flow.float64
    assert x.to(other=other).dtype == flow.int64  # the keyword form, as PyTorch's to(other=...)


def test_tensor_to_copy_gives_a_new_tensor_and_unknown_keywords_are_refused():
    x = flow.tensor([1.0, 2.0])
    for y in (x.to(copy=True), x.to("cpu", flow.float32, False, True)):
        assert y is not x and y.tolist() == [1.0, 2.0]
        y.add_(1)
        assert x.tolist() == [1.0, 2.0]
    assert x.to("cpu", flow.float32) is x
    with pytest.raises(TypeError, match="unexpected keyword arguments \\['devise'\\]"):
        x.to(devise="cpu")


def test_sbp_objects_are_also_called():
    assert flow.sbp.broadcast() == flow.sbp.broadcast
    assert flow.sbp.partial_sum() is flow.sbp.partial_sum
    assert flow.sbp.split(0) == flow.sbp.split(0)() and flow.sbp.split(0) != flow.sbp.split(1)
    x = flow.ones(4, 2, placement=flow.placement.all("cpu"), sbp=flow.sbp.broadcast())
    assert x.sbp == (flow.sbp.broadcast,)


# -- fx.symbolic_trace, fx.Node -------------------------------------------------------------------


class _Net(flow.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = flow.nn.Sequential(flow.nn.Conv2d(3, 4, 3, padding=1), flow.nn.ReLU(), flow.nn.MaxPool2d(2))
        self.head = flow.nn.Linear(16, 5)
        self.scale = flow.nn.Parameter(flow.ones(1) * 2)

    def forward(self, x):
        x = flow.flatten(self.features(x), 1)
        y = self.head(x)
        return self.scale * F.relu(y) + y.size(1) - x.shape[0]


def test_symbolic_trace_records_the_module_as_nodes_and_code():
    model = _Net().eval()
    gm = flow.fx.symbolic_trace(model)
    nodes = gm.graph.nodes
    assert all(isinstance(n, flow.fx.Node) for n in nodes)
    assert [n.op for n in nodes][0] == "placeholder" and nodes[-1].op == "output"
    modules = [n.target for n in nodes if n.op == "call_module"]
    assert modules == ["features.0", "features.1", "features.2", "head"]
    functions = {n.target for n in nodes if n.op == "call_function"}
    assert {flow.flatten, F.relu} <= functions
    assert [n.target for n in nodes if n.op == "get_attr"] == ["scale"]
    assert "flowserve.flatten(" in gm.code and "self.head(" in gm.code and "def forward(self, x):" in gm.code
    head = next(n for n in nodes if n.target == "head")
    assert {u.op for u in head.users} == {"call_function", "call_method"}
    x = flow.randn(2, 3, 4, 4)
    np.testing.assert_array_equal(gm(x).numpy(), model(x).numpy())
    assert isinstance(gm, flow.nn.Module) and type(gm).__name__ == "_Net"
    assert gm.head is model.head and gm.scale is model.scale  # the same objects: training one trains the other
    with flow.no_grad():
        model.scale.fill_(3.0)
    np.testing.assert_array_equal(gm(x).numpy(), model(x).numpy())


def test_symbolic_trace_gradients_match_the_module():
    model = _Net()
    gm = flow.fx.symbolic_trace(model)
    x = flow.randn(2, 3, 4, 4)
    gm(x).sum().backward()
    traced_grad = model.head.weight.grad.numpy().copy()
    model.zero_grad()
    model(x).sum().backward()
    np.testing.assert_allclose(traced_grad, model.head.weight.grad.numpy(), rtol=1e-6)


def test_symbolic_trace_functions_with_list_arguments_and_tensor_first_operators():
    class M(flow.nn.Module):
        def forward(self, x, w1, w2):
            m1 = flow.cat([flow.neg(w1), w2]).sum()
            return 2 * x + flow.max(m1) + flow.tensor([1.0, 2.0, 3.0]) * x

    traced = flow.fx.symbolic_trace(M())
    assert "flowserve.cat([neg, w2])" in traced.code and "flowserve.max(" in traced.code
    args = [flow.randn(3) for _ in range(3)]
    np.testing.assert_allclose(traced(*args).numpy(), M()(*args).numpy(), rtol=1e-6)


def test_fx_graph_edits_recompile():
    class M(flow.nn.Module):
        def forward(self, x):
            return flow.neg(x) + 1

    gm = flow.fx.symbolic_trace(M())
    neg = next(n for n in gm.graph.nodes if n.op == "call_function" and n.target is flow.neg)
    x_node = gm.graph.nodes[0]
    assert neg.replace_all_uses_with(x_node) and not neg.users
    gm.graph.erase_node(neg)
    gm.recompile()
    assert "neg" not in gm.code
    assert gm(flow.tensor([1.0, 2.0])).tolist() == [2.0, 3.0]


def test_symbolic_trace_refuses_what_it_cannot_see():
    class Branchy(flow.nn.Module):
        def forward(self, x):
            return x if x.sum() > 0 else -x

    with pytest.raises(flow.fx.TraceError, match="cannot be used in control flow"):
        flow.fx.symbolic_trace(Branchy())

    class Outsider(flow.nn.Module):
        def forward(self, x):
            return _OUTSIDE(x)

    with pytest.raises(flow.fx.TraceError, match="is not a submodule of the traced module"):
        flow.fx.symbolic_trace(Outsider())
    assert flow.relu(flow.tensor([-1.0])).tolist() == [0.0]  # tracing put every function back


_OUTSIDE = flow.nn.Linear(2, 2)


def test_fx_pass_folds_batch_norm_into_the_convolution_before_it():
    """A conv-bn folding pass written against the fx graph, as OneFlow's fx tutorial writes it."""

    class M(flow.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.bn1 = flow.nn.Conv2d(1, 2, 1), flow.nn.BatchNorm2d(2)
            self.nested = flow.nn.Sequential(flow.nn.Conv2d(2, 2, 1), flow.nn.BatchNorm2d(2))

        def forward(self, x):
            return self.nested(self.bn1(self.conv1(x)))

    model = M()
    model.train()
    model(flow.randn(8, 1, 4, 4) * 3 + 1)  # running statistics away from (0, 1)
    model.eval()
    gm = flow.fx.symbolic_trace(copy.deepcopy(model))  # the pass replaces submodules, which gm shares
    modules = dict(gm.named_modules())
    for node in list(gm.graph.nodes):
        source = node.args[0] if node.args else None
        if node.op == "call_module" and isinstance(modules[node.target], flow.nn.BatchNorm2d) \
                and isinstance(source, flow.fx.Node) and isinstance(modules.get(source.target), flow.nn.Conv2d):
            conv, bn = modules[source.target], modules[node.target]
            scale = bn.weight * flow.rsqrt(bn.running_var + bn.eps)
            fused = flow.nn.Conv2d(conv.in_channels, conv.out_channels, 1)
            fused.weight = flow.nn.Parameter((conv.weight * scale.reshape(-1, 1, 1, 1)).detach())
            fused.bias = flow.nn.Parameter(((conv.bias - bn.running_mean) * scale + bn.bias).detach())
            parent, _, name = source.target.rpartition(".")
            setattr(modules[parent], name, fused)
            node.replace_all_uses_with(source)
            gm.graph.erase_node(node)
    gm.graph.lint()
    gm.recompile()
    assert [n.op for n in gm.graph.nodes] == ["placeholder", "call_module", "call_module", "output"]
    x = flow.randn(3, 1, 4, 4)
    np.testing.assert_allclose(gm(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-5)


def test_fx_graph_lint_finds_a_node_read_before_it_is_defined():
    class M(flow.nn.Module):
        def forward(self, x):
            return flow.neg(x) * 2

    gm = flow.fx.symbolic_trace(M())
    nodes = gm.graph.nodes
    nodes[1], nodes[2] = nodes[2], nodes[1]  # mul before the neg it reads
    with pytest.raises(flow.fx.TraceError, match="reads \\['neg'\\] before"):
        gm.graph.lint()


def test_unittest_dataset_dir_and_mlir_test_case(monkeypatch):
    monkeypatch.delenv("ONEFLOW_TEST_DATASET_DIR", raising=False)
    assert flow.unittest.dataset_dir() == "/dataset"
    monkeypatch.setenv("ONEFLOW_TEST_DATASET_DIR", "/data/of")
    assert flow.unittest.dataset_dir("imagenet") == "/data/of/imagenet"

    class Case(flow.unittest.MLIRTestCase):
        def test_sets(self):
            os.environ["ONEFLOW_MLIR_ENABLE_ROUND_TRIP"] = "1"

    monkeypatch.delenv("ONEFLOW_MLIR_ENABLE_ROUND_TRIP", raising=False)
    assert _run_suite(Case).wasSuccessful()
    assert "ONEFLOW_MLIR_ENABLE_ROUND_TRIP" not in os.environ


def test_symbolic_trace_of_a_function_with_concrete_args():
    def f(a, b, scale=2.0, training=True):
        return F.dropout(flow.cat([a, b]) * scale, 0.5, training=training)

    gm = flow.fx.symbolic_trace(f, concrete_args={"training": False})
    assert [n.name for n in gm.graph.nodes if n.op == "placeholder"] == ["a", "b", "scale"]
    assert "training=False" in gm.code and type(gm).__name__ == "f"
    a, b = flow.randn(2), flow.randn(3)
    np.testing.assert_array_equal(gm(a, b).numpy(), f(a, b, training=False).numpy())
    np.testing.assert_array_equal(gm(a, b, 3.0).numpy(), f(a, b, 3.0, False).numpy())
    with pytest.raises(flow.fx.TraceError, match="concrete_args names \\['nope'\\]"):
        flow.fx.symbolic_trace(f, concrete_args={"nope": 1})


def test_fx_replace_pattern_rewrites_each_occurrence():
    class M(flow.nn.Module):
        def forward(self, x, w1, w2):
            m1 = flow.cat([flow.neg(w1), w2]).sum()
            m2 = flow.cat([flow.neg(w1), w2]).sum()
            return x + flow.max(m1) + flow.max(m2) + flow.neg(x)  # the last neg is not in an occurrence

    def pattern(a1, a2):
        return flow.cat([flow.neg(a1), a2]).sum()

    def replacement(w1, w2):
        return flow.stack([w1, w2])

    traced = flow.fx.symbolic_trace(M())
    matches = flow.fx.replace_pattern(traced, pattern, replacement)
    assert len(matches) == 2 and all(isinstance(m, flow.fx.Match) for m in matches)
    assert "cat" not in traced.code and traced.code.count("flowserve.stack([w1, w2])") == 2
    assert traced.code.count("flowserve.neg(") == 1
    x, a, b = flow.randn(3), flow.randn(3), flow.randn(3)
    expected = x + 2 * flow.max(flow.stack([a, b])) + flow.neg(x)
    np.testing.assert_allclose(traced(x, a, b).numpy(), expected.numpy(), rtol=1e-6)


def test_fx_replace_pattern_leaves_an_occurrence_whose_inner_value_is_read_elsewhere():
    class M(flow.nn.Module):
        def forward(self, x, y):
            n = flow.neg(x)
            return (n + y) * n  # n is read outside the pattern neg(a) + b

    traced = flow.fx.symbolic_trace(M())
    assert flow.fx.replace_pattern(traced, lambda a, b: flow.neg(a) + b, lambda a, b: b - a) == []
    x, y = flow.tensor([1.0, 2.0]), flow.tensor([3.0, 4.0])
    assert traced(x, y).tolist() == M()(x, y).tolist()


def test_symbolic_trace_keeps_keyword_only_arguments():
    class M(flow.nn.Module):
        def forward(self, x, *, scale=2.0, shift):
            return x * scale + shift

    gm = flow.fx.symbolic_trace(M())
    assert "def forward(self, x, *, scale=2.0, shift):" in gm.code
    x, s = flow.ones(2), flow.full((2,), 3.0)
    assert gm(x, shift=s).tolist() == M()(x, shift=s).tolist() == [5.0, 5.0]
    assert gm(x, scale=1.0, shift=s).tolist() == [4.0, 4.0]
