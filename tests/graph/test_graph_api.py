"""nn.Graph's API rules: attributes, names, proxies, nested IO, static inputs, dynamic
batch, per-signature cache, inference refresh, config validation, debug and repr."""

import ast
import warnings
from pathlib import Path

import numpy as np
import pytest

import flowserve as flow
import flowserve.nn as nn
from flowserve.errors import GraphError
from flowserve.nn.graph import GraphModule
from tests.graph.helpers import TrainGraph, data, mlp


class Infer(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def build(self, x):
        return self.model(x)


def test_attribute_rules_and_messages():
    class Early(nn.Graph):
        def __init__(self):
            self.model = nn.Linear(2, 2)

    with pytest.raises(AttributeError, match=r"call super\(\).__init__\(\)"):
        Early()
    g = Infer(nn.Linear(2, 2))
    with pytest.raises(AttributeError, match="not allowed to set Optimizer attribute named 'opt'"):
        g.opt = flow.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1)
    with pytest.raises(AttributeError, match="not allowed to set Tensor attribute named 't'"):
        g.t = flow.ones(2)
    with pytest.raises(KeyError, match="attribute 'config' already exists"):
        g.config = nn.Linear(2, 2)
    with pytest.raises(KeyError, match='contain ".", got: a.b'):
        setattr(g, "a.b", nn.Linear(2, 2))


def test_names_count_per_class():
    class Counted(nn.Graph):
        def build(self):
            return None

    assert [Counted().name, Counted().name] == ["Counted_0", "Counted_1"]


def test_proxy_gives_graph_module_and_module():
    model = mlp()
    g = Infer(model)
    assert g.model.to(nn.Module) is model
    gm = g.model[0].to(GraphModule)
    assert gm is g.model[0].to(GraphModule) and (gm.name_prefix, gm.name, gm.full_name) == ("model.", "0", "model.0")
    gm.set_stage(0, "cpu")
    with pytest.raises(ValueError, match="non-negative int stage_id"):
        gm.set_stage(-1)
    with pytest.raises(TypeError, match="must be a bool"):
        g.model.to(GraphModule).activation_checkpointing = "yes"
    g(flow.ones(2, 12))
    assert g._last.traced.ir.attrs["stages"] == {"model.0": {"stage_id": 0, "placement": "cpu"}}
    assert "(GraphModule:model.0:stage_id=0, placement=cpu)" in repr(g)



def test_internal_api_gives_the_registered_modules_their_names_and_options():
    """What tracing, saving, printing and state_dict read of a graph's modules."""
    model = mlp()
    g = Infer(model)
    g.model[0].to(GraphModule).activation_checkpointing = True
    assert list(g.original_modules().items()) == [("model", model)]  # the modules, not their proxies
    names = g.module_names()
    assert names[id(model)] == "model" and names[id(model[0])] == "model.0"
    options = g.graph_modules()
    assert options["model.0"] is g.model[0].to(GraphModule) and options["model.0"].activation_checkpointing
    assert set(options) == {name for name, _ in model.named_modules(prefix="model")}
    with pytest.raises(KeyError, match="attribute 'original_modules' already exists"):
        g.original_modules = nn.Linear(2, 2)


def test_no_module_of_flowserve_reads_a_graphs_private_attributes():
    """Other modules read a graph through its documented seam (``graph.parts``, the internal
    API section of ``nn.Graph``), never ``graph._<name>``."""
    package = Path(flow.__file__).parent
    offenders = []
    for path in sorted(package.rglob("*.py")):
        if path == package / "nn" / "graph" / "graph.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "graph" \
                    and node.attr.startswith("_") and not node.attr.startswith("__"):
                offenders.append(f"{path.relative_to(package)}:{node.lineno}: graph.{node.attr}")
    assert not offenders, "\n".join(offenders)

def test_unregistered_module_warns_once():
    helper = nn.Linear(12, 12)
    model = mlp()

    class Uses(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model

        def build(self, x):
            return self.model(helper(helper(x)))

    g = Uses()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g(flow.ones(2, 12))
    assert len([w for w in caught if "is called in a nn.Graph, but not registered into a nn.Graph" in str(w.message)]) == 1


def test_nested_inputs_and_outputs_keep_structure():
    model = mlp()

    class Nested(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model

        def build(self, batch, extra=None):
            out = self.model(batch["x"])
            return {"logits": out, "pair": (out.sum(), None), "list": [batch["x"] * 2]}

    x = flow.randn(3, 12)
    out = Nested()({"x": x}, extra=None)
    assert set(out) == {"logits", "pair", "list"} and out["pair"][1] is None
    np.testing.assert_allclose(out["logits"].numpy(), model(x).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["list"][0].numpy(), x.numpy() * 2)


def test_static_input_error_names_index_and_metas():
    g = Infer(mlp())
    g(flow.ones(4, 12))
    with pytest.raises(GraphError, match=r"input 0 \('x'\) was tensor\(\.\.\., size=\(4, 12\), dtype=flowserve"
                                          r"\.float32\).*got tensor\(\.\.\., size=\(4, 13\)"):
        g(flow.ones(4, 13))
    with pytest.raises(GraphError, match="dtype=flowserve.float64"):
        g(flow.ones(4, 12, dtype=flow.float64))


def test_batch_dimension_is_dynamic_without_recompiling():
    model = mlp()
    g = Infer(model)
    g(flow.ones(4, 12))
    session = g._last.session
    for batch in (1, 7, 4):
        x = flow.randn(batch, 12)
        np.testing.assert_allclose(g(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-6)
    assert g._last.session is session and g._last.dynamic_batch


def test_training_graph_with_mean_loss_follows_the_batch():
    """The mean's count and the backward's expands follow the batch: one session trains
    at batch 8 then 4, as eager does."""
    model, twin = mlp(), mlp()
    g = TrainGraph(model, flow.optim.SGD(model.parameters(), lr=0.1))
    opt = flow.optim.SGD(twin.parameters(), lr=0.1)
    for batch in (8, 4, 8):
        x, y = data(batch=batch, seed=batch)
        loss = g(x, y)
        opt.zero_grad()
        ref = nn.CrossEntropyLoss()(twin(x), y)
        ref.backward()
        opt.step()
        np.testing.assert_allclose(float(loss), float(ref), rtol=1e-5)
    assert g._last is g._compiled and g._last.dynamic_batch
    for p, q in zip(model.parameters(), twin.parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-6)


def test_training_graph_with_batch_sized_constant_is_batch_static():
    model = mlp()

    class Weighted(nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.add_optimizer(flow.optim.SGD(model.parameters(), lr=0.1))

        def build(self, x, y):
            weights = flow.tensor(np.linspace(0, 1, 8, dtype=np.float32))  # one weight per sample of 8
            loss = (nn.functional.cross_entropy(self.model(x), y, reduction="none") * weights).mean()
            loss.backward()
            return loss

    g = Weighted()
    g(*data(batch=8))
    with pytest.raises(GraphError, match="static graph"):
        g(*data(batch=4))


def test_dynamic_input_shape_caches_one_graph_per_signature():
    model = mlp()

    class Cached(nn.Graph):
        @nn.Graph.with_dynamic_input_shape(size=2)
        def __init__(self):
            super().__init__()
            self.model = model

        def build(self, x):
            return self.model(x)

    g = Cached()
    for shape in [(2, 12), (3, 12), (2, 12), (5, 12)]:
        x = flow.randn(*shape)
        np.testing.assert_allclose(g(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-6)
    assert len(g._cache.entries) == 2  # least recently used dropped
    assert all(c.traced.state["model.0.weight"] is model[0].weight for c in g._cache.entries.values())


def test_inference_graph_notices_eager_parameter_change():
    model = mlp()
    g = Infer(model)
    x = flow.randn(2, 12)
    g(x)
    with flow.no_grad():
        model[0].weight.copy_(model[0].weight * 2)
    np.testing.assert_allclose(g(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-6)


def test_add_optimizer_rules():
    model = mlp()
    opt = flow.optim.SGD(model.parameters(), lr=0.1)
    other = flow.optim.SGD(model.parameters(), lr=0.1)
    g = Infer(model)
    with pytest.raises(GraphError, match="lr_scheduler's optimizer must be the same optimizer"):
        g.add_optimizer(opt, lr_sch=flow.optim.lr_scheduler.StepLR(other, step_size=1))
    with pytest.raises(GraphError, match="instance of Optimizer"):
        g.add_optimizer("sgd")
    assert not g.training
    g.add_optimizer(opt)
    assert g.training and "training=True" in repr(g)


def test_several_optimizers_update_their_parameters():
    model = mlp()
    first = flow.optim.SGD(list(model.parameters())[:2], lr=0.1)
    second = flow.optim.Adam(list(model.parameters())[2:], lr=0.01)
    g = TrainGraph(model, first)
    g.add_optimizer(second)
    before = [p.numpy().copy() for p in model.parameters()]
    g(*data())
    assert all(not np.array_equal(b, p.numpy()) for b, p in zip(before, model.parameters()))
    assert "model.2.weight-m" in g.state_dict() and "model.0.weight-momentum" not in g.state_dict()


def test_config_validation_and_records():
    config = flow.nn.graph.GraphConfig()
    with pytest.raises(ValueError, match="ZeRO stage must be 1, 2 or 3"):
        config.enable_zero(True, stage=4)
    with pytest.raises(ValueError, match="enable_straighten_algorithm expects one of"):
        config.enable_straighten_algorithm("Fastest")
    with pytest.raises(ValueError, match="gradient accumulation steps"):
        config.set_gradient_accumulation_steps(0)
    with pytest.raises(ValueError, match="float16 or flowserve.bfloat16"):
        config.enable_amp(True, dtype=flow.float64)
    g = Infer(mlp())
    g.config.enable_zero(True, stage=2)
    g.config.enable_cudnn_conv_heuristic_search_algo(True)
    g.config.set_outputs_buffer_size(3)
    x = flow.randn(2, 12)
    outs = [g(x) for _ in range(4)]
    np.testing.assert_allclose(outs[0].numpy(), outs[3].numpy())
    assert g._last.traced.ir.attrs["zero"]["stage"] == 2
    assert "'stage': 2" in repr(g) and "cudnn_conv_heuristic_search_algo=True" in repr(g)


@pytest.mark.parametrize("buffers", [1, 2])
def test_outputs_of_earlier_calls_are_never_overwritten(buffers):
    """Inference graphs take the runtime's fresh outputs, training steps copy theirs out of
    the rotating buffers: either way an output kept from an earlier call, even one changed
    in place, holds its own values."""
    model, trained = mlp(), mlp()
    infer = Infer(model)
    step = TrainGraph(trained, flow.optim.SGD(trained.parameters(), lr=0.1))
    for g in (infer, step):
        g.config.set_outputs_buffer_size(buffers)
    inputs = [data(seed=s) for s in range(4)]
    kept = [infer(x) for x, _ in inputs]
    for out, (x, _) in zip(kept, inputs):
        np.testing.assert_allclose(out.numpy(), model(x).numpy(), rtol=1e-6, atol=1e-6)
    kept[0].add_(1.0)
    np.testing.assert_allclose(infer(inputs[0][0]).numpy(), kept[0].numpy() - 1.0, rtol=1e-6, atol=1e-6)
    losses, read_at_once = [], []
    for x, y in inputs:
        losses.append(step(x, y))
        read_at_once.append(float(losses[-1]))
    assert [float(loss) for loss in losses] == read_at_once
    assert len(set(read_at_once)) == 4


def test_repr_before_and_after_first_call():
    g = TrainGraph(mlp(), flow.optim.SGD(mlp().parameters(), lr=0.1))
    before = repr(g)
    assert before.startswith("(GRAPH:TrainGraph_") and "(CONFIG:config:GraphConfig(training=True, ))" in before
    assert "(MODULE:model.0:Linear(in_features=12, out_features=16, bias=True)): (" in before
    assert "(PARAMETER:model.0.weight:tensor(..., size=(16, 12), dtype=flowserve.float32, requires_grad=True)): ()" \
        in before and "INPUT" not in before


def test_debug_levels_print_stages_modules_ops_and_locations(capsys):
    model = mlp()
    g = TrainGraph(model, flow.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(GraphError, match="max verbose debug info level is 3"):
        g.debug(4)
    g.debug(0)
    g(*data())
    out = capsys.readouterr().out
    assert "start building graph." in out and "building plan Done! Cost time:" in out
    assert "(MODULE:" not in out
    g3 = Infer(mlp())
    g3.debug(3, max_py_stack_depth=1)
    g3(flow.ones(2, 12))
    out = capsys.readouterr().out
    assert "(MODULE:model.0:Linear(in_features=12, out_features=16, bias=True)) start building module." in out
    assert "(INPUT:_model.0-input_0:tensor(..., is_lazy='True', size=(2, 12)" in out
    assert "(OPERATOR: model.0/matmul(" in out and "device=cpu" in out
    assert "(LOCATION: " in out and "test_graph_api.py" in out.split("(LOCATION: ")[1].split(")")[0]


def test_an_in_place_update_of_an_input_warns_that_the_caller_keeps_its_tensor():
    class Scale(nn.Graph):
        def build(self, x):
            x.mul_(2)
            return x + 1

    x = flow.ones(3)
    with pytest.warns(UserWarning, match=r"changed the graph's input 'x' \(.*test_graph_api.py:\d+\): the graph "
                                         r"computes with the new value, but the caller's tensor keeps its old one"):
        out = Scale()(x)
    np.testing.assert_array_equal(out.numpy(), [3.0, 3.0, 3.0])
    np.testing.assert_array_equal(x.numpy(), [1.0, 1.0, 1.0])
