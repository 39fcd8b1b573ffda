"""Graph training equals eager training: optimizers, schedulers, accumulation,
checkpointing and the fusion options change no result (5 steps, 1e-5 relative)."""

import pytest

import flowserve as flow
from tests.graph.helpers import (ResMLP, TrainGraph, assert_close, assert_same_params, data, eager_steps,
                                 make_optimizer, mlp)

STEPS = 5


def _pair(kind: str, with_sched: bool, model_fn=mlp):
    eager_model, graph_model = model_fn(), model_fn()
    eager_opt, graph_opt = make_optimizer(kind, eager_model.parameters()), make_optimizer(kind, graph_model.parameters())
    scheds = (None, None)
    if with_sched:
        scheds = tuple(flow.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5) for o in (eager_opt, graph_opt))
    return eager_model, graph_model, eager_opt, graph_opt, scheds


@pytest.mark.parametrize("with_sched", [False, True])
@pytest.mark.parametrize("kind", ["sgd", "adam", "adamw"])
def test_graph_training_equals_eager(kind, with_sched):
    eager_model, graph_model, eager_opt, graph_opt, (es, gs) = _pair(kind, with_sched)
    x, y = data()
    expected = eager_steps(eager_model, eager_opt, es, x, y, STEPS)
    graph = TrainGraph(graph_model, graph_opt, gs)
    losses = [graph(x, y).numpy() for _ in range(STEPS)]
    assert_close(losses, expected, what="losses")
    assert_same_params(graph_model, eager_model)  # the eager module holds the graph's values
    if with_sched:
        assert graph_opt.param_groups[0]["lr"] == eager_opt.param_groups[0]["lr"]


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_gradient_accumulation_equals_eager_micro_batches(kind):
    eager_model, graph_model, eager_opt, graph_opt, _ = _pair(kind, False)
    x, y = data(batch=16)
    expected = eager_steps(eager_model, eager_opt, None, x, y, STEPS, micro=4)
    graph = TrainGraph(graph_model, graph_opt, accumulation=4)
    losses = [graph(x, y) for _ in range(STEPS)]
    assert tuple(losses[0].shape) == (4,)  # the loss of each micro-batch
    assert_close([l.numpy() for l in losses], expected, what="micro-batch losses")
    assert_same_params(graph_model, eager_model)


def test_gradient_accumulation_needs_divisible_batch():
    model = mlp()
    graph = TrainGraph(model, flow.optim.SGD(model.parameters(), lr=0.1), accumulation=3)
    with pytest.raises(flow.errors.GraphError, match="micro-batches"):
        graph(*data(batch=16))


@pytest.mark.parametrize("option", ["activation_checkpointing", "fuse_model_update_ops", "fuse_add_to_output",
                                    "fuse_cast_scale", "straighten", "compress_memory"])
def test_graph_options_change_no_result(option):
    eager_model, graph_model, eager_opt, graph_opt, _ = _pair("adam", False, model_fn=ResMLP)
    x, y = data()
    expected = eager_steps(eager_model, eager_opt, None, x, y, STEPS)
    graph = TrainGraph(graph_model, graph_opt)
    if option == "activation_checkpointing":
        graph.model.block1.to(flow.nn.graph.GraphModule).activation_checkpointing = True
        graph.model.block2.to(flow.nn.graph.GraphModule).activation_checkpointing = True
    elif option == "straighten":
        graph.config.enable_straighten_algorithm("MemoryFirst")
    elif option == "compress_memory":
        graph.config.enable_compress_memory(True)
    else:
        getattr(graph.config, f"allow_{option}")(True)
    losses = [graph(x, y).numpy() for _ in range(STEPS)]
    assert_close(losses, expected, what="losses")
    assert_same_params(graph_model, eager_model)
    ir = graph._last.traced.ir
    if option == "activation_checkpointing":
        assert "activation_checkpointing" in ir.attrs["passes"]
        assert any(n.outputs[0].endswith("@recompute") and n.scope.startswith("model.block1") for n in ir.nodes)
