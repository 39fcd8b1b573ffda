"""A graph follows the modes eager mode reads on every call: each module's ``training`` flag
(``model.eval()``, ``model.bn.train()``) and, training, each parameter's ``requires_grad``.
A call after one changed runs the graph traced in the new modes, compiled at its first such
call and kept, so switching back compiles nothing."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import flowserve as flow
import flowserve.nn as nn

from tests.graph.helpers import (DynamicForwardGraph, ForwardGraph, TrainGraph, assert_close,
                                 assert_same_params, data)


def _bn_net(seed: int = 0) -> nn.Module:
    flow.manual_seed(seed)
    return nn.Sequential(nn.Linear(12, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 4))


def _eager_step(model, opt, x, y):
    opt.zero_grad()
    loss = nn.CrossEntropyLoss()(model(x), y)
    loss.backward()
    opt.step()
    return loss.numpy()


@pytest.mark.parametrize("graph_cls", [ForwardGraph, DynamicForwardGraph])
def test_an_inference_graph_follows_eval_and_train_between_calls(graph_cls):
    model = _bn_net()
    graph = graph_cls(model)
    x, _ = data()
    for switch in ("train", "eval", "train", "eval"):
        getattr(model, switch)()
        expected = model(x).numpy()  # train mode: batch statistics (no dropout: repeatable)
        assert_close(graph(x).numpy(), expected, what=switch)
    assert graph.parts.last.modes == tuple(m.training for m in model.modules())


def test_switching_back_reuses_the_graph_compiled_for_those_modes():
    model = _bn_net()
    graph = ForwardGraph(model)
    x, _ = data()
    graph(x)
    train_form = graph.parts.last
    model.eval()
    graph(x)
    assert graph.parts.last is not train_form
    model.train()
    graph(x)
    assert graph.parts.last is train_form


def test_one_submodule_in_eval_mode_is_followed():
    model = _bn_net()
    graph = ForwardGraph(model)
    x, _ = data()
    graph(x)
    model[1].eval()  # frozen batch norm statistics, the rest in training mode
    assert_close(graph(x).numpy(), model(x).numpy())


def test_a_training_graph_follows_a_layer_frozen_and_batch_norm_put_in_eval_mode():
    graph_model = _bn_net()
    eager_model = copy.deepcopy(graph_model)
    graph_opt = flow.optim.SGD(graph_model.parameters(), lr=0.1, momentum=0.9)
    eager_opt = flow.optim.SGD(eager_model.parameters(), lr=0.1, momentum=0.9)
    graph = TrainGraph(graph_model, graph_opt)
    x, y = data()
    changes = [lambda m: None,
               lambda m: m[0].weight.requires_grad_(False),
               lambda m: m[1].eval(),
               lambda m: (m[0].weight.requires_grad_(True), m.train())]
    for change in changes:
        change(graph_model)
        change(eager_model)
        frozen = graph_model[0].weight.numpy().copy()
        assert_close(graph(x, y).numpy(), _eager_step(eager_model, eager_opt, x, y))
        assert_same_params(graph_model, eager_model)
        if not graph_model[0].weight.requires_grad:
            np.testing.assert_array_equal(graph_model[0].weight.numpy(), frozen)
    assert_close(graph_model[1].running_mean.numpy(), eager_model[1].running_mean.numpy())


def test_a_saved_graph_is_the_form_of_its_last_call(tmp_path):
    model = _bn_net()
    graph = ForwardGraph(model)
    x, _ = data()
    graph(x)
    model.eval()
    graph(x)
    flow.save(graph, tmp_path / "eval")
    assert_close(flow.load(tmp_path / "eval")(x).numpy(), model(x).numpy())


@pytest.mark.parametrize("replace", ["parameter", "submodule", "buffer"])
@pytest.mark.parametrize("graph_cls", [ForwardGraph, DynamicForwardGraph])
def test_a_replaced_parameter_buffer_or_submodule_is_traced_again(replace, graph_cls):
    model = _bn_net().eval()
    graph = graph_cls(model)
    x, _ = data()
    graph(x)
    if replace == "parameter":
        model[0].weight = nn.Parameter(flow.zeros(8, 12))
    elif replace == "submodule":
        flow.manual_seed(3)
        model[3] = nn.Linear(8, 4)
    else:
        model[1].running_mean = flow.ones(8)
    assert_close(graph(x).numpy(), model(x).numpy(), what=replace)


@pytest.mark.parametrize("graph_cls", [ForwardGraph, DynamicForwardGraph])
def test_hooks_added_or_removed_after_the_first_call_are_traced_again(graph_cls):
    model = _bn_net().eval()
    graph = graph_cls(model)
    x, _ = data()
    graph(x)
    doubled = model[0].register_forward_hook(lambda module, args, out: out * 2)
    assert_close(graph(x).numpy(), model(x).numpy(), what="forward hook")
    shifted = model[3].register_forward_pre_hook(lambda module, args: (args[0] + 1,))
    assert_close(graph(x).numpy(), model(x).numpy(), what="pre-hook")
    doubled.remove()
    shifted.remove()
    shifted.remove()  # a second remove changes nothing
    assert_close(graph(x).numpy(), model(x).numpy(), what="removed")


def test_a_model_converted_to_float64_after_the_first_call_computes_as_eagerly():
    model = _bn_net().eval()
    graph = ForwardGraph(model)
    x, _ = data()
    graph(x)
    model.double()
    got = graph(x)
    assert got.dtype == model(x).dtype == flow.float64
    np.testing.assert_allclose(got.numpy(), model(x).numpy(), rtol=1e-12, atol=1e-12)


def test_a_parameter_group_added_after_the_first_step_is_trained_as_eagerly():
    graph_model = _bn_net()
    eager_model = copy.deepcopy(graph_model)
    graph_opt = flow.optim.SGD(graph_model[0].parameters(), lr=0.1, momentum=0.9)
    eager_opt = flow.optim.SGD(eager_model[0].parameters(), lr=0.1, momentum=0.9)
    graph = TrainGraph(graph_model, graph_opt)
    x, y = data()
    for step in range(4):
        if step == 1:
            graph_opt.add_param_group({"params": list(graph_model[3].parameters()), "lr": 0.5})
            eager_opt.add_param_group({"params": list(eager_model[3].parameters()), "lr": 0.5})
        assert_close(graph(x, y).numpy(), _eager_step(eager_model, eager_opt, x, y), what=f"step {step}")
        assert_same_params(graph_model, eager_model)


def test_a_config_option_set_after_the_first_call_takes_effect():
    model = _bn_net().eval()
    x, _ = data()
    late = ForwardGraph(model)
    late(x)
    late.config.enable_amp(True)
    early = ForwardGraph(model)
    early.config.enable_amp(True)
    np.testing.assert_array_equal(late(x).numpy(), early(x).numpy())
    assert late.parts.last.traced.ir.attrs.get("passes") == early.parts.last.traced.ir.attrs.get("passes")
