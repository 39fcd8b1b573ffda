"""Give graph outputs their public names (``output_0`` or the keys build() returned)."""

from __future__ import annotations

from flowserve.ir.graph import GraphIR, Node, PassResult, Value


def name_outputs(ir: GraphIR, values: list[str], names: list[str]) -> PassResult:
    """Make ``names[i]`` the name of output ``values[i]``: rename the producing node's
    output where that value is used nowhere else as an output, else add a ``copy`` node."""
    producers = ir.producers()
    renamed, outputs = {}, []
    for value_name, public in zip(values, names):
        meta = ir.values[renamed.get(value_name, value_name)]
        renamable = value_name in producers and value_name not in renamed \
            and value_name not in ir.updates.values()
        if renamable:
            _rename(ir, value_name, public)
            renamed[value_name] = public
        else:
            ir.nodes.append(Node("copy", [renamed.get(value_name, value_name)], [public], {}, "", ""))
        ir.values[public] = Value(public, meta.shape, meta.dtype)
        outputs.append(ir.values[public])
    ir.outputs = outputs
    return PassResult(ir, True)


def _rename(ir: GraphIR, old: str, new: str) -> None:
    for node in ir.nodes:
        node.inputs = [new if n == old else n for n in node.inputs]
        node.outputs = [new if n == old else n for n in node.outputs]
    ir.updates = {k: (new if v == old else v) for k, v in ir.updates.items()}
    ir.values.pop(old)
