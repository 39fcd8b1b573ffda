"""Dead-code elimination keeps what outputs and updates need, and all outputs of kept nodes."""

from __future__ import annotations

import flowserve as flow
from flowserve.ir.graph import GraphIR, Node, Value
from flowserve.ir.passes import eliminate_dead_code


def _ir():
    ir = GraphIR("g")
    for name in ("x", "a", "b", "values", "indices", "dead"):
        ir.add_value(Value(name, (2, 3), "float32" if name != "indices" else "int64"))
    ir.inputs = [ir.values["x"]]
    ir.nodes = [
        Node("relu", ["x"], ["a"]),
        Node("exp", ["x"], ["dead"]),
        Node("topk", ["a"], ["values", "indices"], {"k": 3, "axis": 1, "largest": True}),
        Node("neg", ["values"], ["b"]),
    ]
    ir.outputs = [ir.values["b"]]
    return ir


def test_unused_nodes_are_dropped_and_multi_output_metadata_kept():
    ir, modified = eliminate_dead_code(_ir())
    assert modified
    assert [n.op for n in ir.nodes] == ["relu", "topk", "neg"]
    assert "indices" in ir.values and "dead" not in ir.values
    ir.validate()


def test_saved_graph_with_a_multi_output_op_loads(tmp_path):
    class TopK(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.lin = flow.nn.Linear(4, 6)

        def build(self, x):
            return flow.topk(self.lin(x), 2).values

    graph = TopK()
    x = flow.randn(3, 4)
    expected = graph(x).numpy()
    flow.save(graph, tmp_path / "g")
    assert (flow.load(tmp_path / "g")(x).numpy() == expected).all()
