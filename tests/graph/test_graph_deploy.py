"""Which module a saved training graph deploys: ``flow.save(graph, dir, model=...)``, the
``nn.Graph.deploy()`` hook, or the default (the last top-level non-loss module called);
and the graph's state behind ``graph.parts``."""

from __future__ import annotations

import numpy as np
import pytest

import flowserve as flow
import flowserve.nn as nn
from flowserve.errors import GraphError
from tests.graph.helpers import data, mlp
from tests.graph.test_graph_api import Infer


class Distill(nn.Graph):
    """A student trained against a frozen teacher: build() calls the teacher last."""

    def __init__(self, student, teacher, deploy_student: bool = False):
        super().__init__()
        self.student, self.teacher = student, teacher
        self.loss_fn = nn.MSELoss()
        self.deploy_student = deploy_student
        self.add_optimizer(flow.optim.SGD(student.parameters(), lr=0.1))

    def build(self, x):
        out = self.student(x)
        with flow.no_grad():
            target = self.teacher(x)
        loss = self.loss_fn(out, target)
        loss.backward()
        return loss

    def deploy(self):
        return self.student if self.deploy_student else None


def _trained(deploy_student: bool = False):
    x, _ = data()
    student, teacher = mlp(seed=1), mlp(seed=2)
    graph = Distill(student, teacher, deploy_student)
    graph(x)
    return graph, student, teacher, x


def _served(path, x) -> np.ndarray:
    return flow.load(path)(x).numpy()


def test_model_argument_picks_the_deployed_module(tmp_path):
    graph, student, teacher, x = _trained()
    flow.save(graph, tmp_path / "student", model=graph.student)
    flow.save(graph, tmp_path / "guess")
    np.testing.assert_allclose(_served(tmp_path / "student", x), student.eval()(x).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_served(tmp_path / "guess", x), teacher.eval()(x).numpy(), rtol=1e-5, atol=1e-6)
    flow.save(graph, tmp_path / "module", model=student)  # the module itself works as well as its proxy
    np.testing.assert_allclose(_served(tmp_path / "module", x), student(x).numpy(), rtol=1e-5, atol=1e-6)


def test_deploy_hook_picks_the_deployed_module(tmp_path):
    graph, student, _, x = _trained(deploy_student=True)
    flow.save(graph, tmp_path / "hooked")
    np.testing.assert_allclose(_served(tmp_path / "hooked", x), student.eval()(x).numpy(), rtol=1e-5, atol=1e-6)


def test_a_module_the_graph_does_not_call_is_refused(tmp_path):
    graph, _, _, _ = _trained()
    with pytest.raises(GraphError, match="not a top-level module that build\\(\\) of .* calls"):
        flow.save(graph, tmp_path / "other", model=mlp())
    with pytest.raises(GraphError, match="must be an nn.Module"):
        flow.save(graph, tmp_path / "other", model="student")
    with pytest.raises(TypeError, match="model= applies to an nn.Graph only"):
        flow.save(graph.state_dict(), tmp_path / "state", model=graph.student)


def test_an_inference_graph_deploys_its_own_build(tmp_path):
    graph = Infer(mlp())
    x, _ = data()
    graph(x)
    with pytest.raises(GraphError, match="inference graph: it deploys its own build"):
        flow.save(graph, tmp_path / "g", model=graph.model)


def test_parts_hold_optimizers_scaler_step_and_the_latest_entry():
    x, _ = data()
    student, teacher = mlp(seed=1), mlp(seed=2)
    graph = Distill(student, teacher)
    parts = graph.parts
    assert parts.last is None and parts.traced is None and not graph.is_compiled
    assert [type(opt).__name__ for opt, sched in parts.optimizers] == ["SGD"] and parts.grad_scaler is None
    graph(x)
    graph(x)
    assert graph.is_compiled and parts.traced.ir.inputs and int(parts.train_step.item()) == 2
    assert graph.state_dict()["System-Train-TrainStep"].item() == 2
