"""Bad use gets one clear error that names the problem."""

from __future__ import annotations

import pytest

import flowserve as flow
from flowserve.errors import GraphError, SavedGraphError, ShapeError


def test_module_before_super_init_is_onefow_attribute_error():
    class Bad(flow.nn.Graph):
        def __init__(self):
            self.model = flow.nn.Linear(2, 2)
            super().__init__()

        def build(self, x):
            return self.model(x)

    with pytest.raises(AttributeError, match=r"call super\(\)\.__init__\(\)"):
        Bad()


def test_module_parameter_before_super_init():
    class Bad(flow.nn.Module):
        def __init__(self):
            self.w = flow.nn.Parameter(flow.zeros(2))

    with pytest.raises(AttributeError, match="before Module.__init__"):
        Bad()


def test_load_missing_directory_names_it(tmp_path):
    with pytest.raises(SavedGraphError, match="no such file"):
        flow.load(tmp_path / "nothing-here")


def test_load_damaged_manifest_names_the_file(tmp_path):
    (tmp_path / "flowserve.json").write_text("{not json")
    with pytest.raises(SavedGraphError, match=r"flowserve\.json: not valid JSON"):
        flow.load(tmp_path)


def test_save_uncalled_graph_refused(tmp_path):
    class G(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = flow.nn.Linear(2, 2)

        def build(self, x):
            return self.model(x)

    with pytest.raises(GraphError, match="compiled first"):
        flow.save(G(), tmp_path / "g")
    assert not (tmp_path / "g").exists()


def test_shape_error_names_op_and_shapes():
    with pytest.raises(ShapeError, match=r"matmul expected .*\(2, 3\) @ \(4, 5\)"):
        flow.matmul(flow.zeros(2, 3), flow.zeros(4, 5))


def test_state_dict_round_trip_file_and_dir(tmp_path):
    model = flow.nn.Sequential(flow.nn.Linear(3, 4), flow.nn.ReLU(), flow.nn.Linear(4, 2))
    for target in (tmp_path / "model.pt", tmp_path / "ckpt"):
        flow.save(model.state_dict(), target)
        loaded = flow.load(target)
        assert list(loaded) == list(model.state_dict())
        fresh = flow.nn.Sequential(flow.nn.Linear(3, 4), flow.nn.ReLU(), flow.nn.Linear(4, 2))
        fresh.load_state_dict(loaded)
        x = flow.randn(5, 3)
        assert (fresh(x).numpy() == model(x).numpy()).all()
