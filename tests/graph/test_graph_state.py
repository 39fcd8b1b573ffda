"""Graph state: state_dict layout and names, exact resume, loading rules."""

import numpy as np
import pytest

import flowserve as flow
from flowserve.errors import GraphError
from tests.graph.helpers import TrainGraph, assert_same_params, data, make_optimizer, mlp


def _graph(kind: str = "sgd"):
    model = mlp()
    return TrainGraph(model, make_optimizer(kind, model.parameters())), model


def test_state_dict_names_follow_oneflow():
    graph, _ = _graph("sgd")
    graph(*data())
    sd = graph.state_dict()
    assert list(sd["model"]) == ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"]
    assert "model.0.weight-momentum" in sd and sd["System-Train-TrainStep"].numpy() == 1
    adam, _ = _graph("adam")
    adam(*data())
    keys = adam.state_dict().keys()
    assert {"model.0.weight-m", "model.0.weight-v", "model.0.weight-step"} <= set(keys)


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_resume_is_exact(tmp_path, kind):
    x, y = data()
    straight, straight_model = _graph(kind)
    for _ in range(3):
        straight(x, y)
    first, _ = _graph(kind)
    for _ in range(2):
        first(x, y)
    flow.save(first.state_dict(), tmp_path / "ckpt")
    resumed, resumed_model = _graph(kind)
    resumed.load_state_dict(flow.load(tmp_path / "ckpt"))
    resumed(x, y)
    assert_same_params(resumed_model, straight_model, rtol=0)
    got, want = resumed.state_dict(), straight.state_dict()
    assert got.keys() == want.keys()
    for key in got:
        if key not in ("model", "loss_fn"):
            np.testing.assert_array_equal(got[key].numpy(), want[key].numpy(), err_msg=key)
    assert int(got["System-Train-TrainStep"].numpy()) == 3


def test_load_only_before_first_call():
    graph, _ = _graph()
    graph(*data())
    with pytest.raises(GraphError, match="can only be loaded before the first call of a graph"):
        graph.load_state_dict(graph.state_dict())


def test_strict_load_reports_missing_and_unexpected():
    graph, _ = _graph()
    graph(*data())
    sd = graph.state_dict()
    del sd["model.0.weight-momentum"]
    sd["bogus"] = flow.zeros(1)
    fresh, _ = _graph()
    with pytest.raises(GraphError, match='(?s)Unexpected key.*"bogus".*Missing key.*"model.0.weight-momentum"'):
        fresh.load_state_dict(sd)
    fresh.load_state_dict(sd, strict=False)


def test_proxy_state_dict_points_to_graph_state_dict():
    graph, _ = _graph()
    with pytest.raises(TypeError, match="graph.state_dict"):
        graph.model.state_dict()
