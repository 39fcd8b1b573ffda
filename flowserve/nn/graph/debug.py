"""``graph.debug(v_level)``: what nn.Graph prints while it builds and compiles.

- ``v_level=0``: the build stages and their times, peak memory of the first run;
- ``1``: also each module's inputs, parameters, buffers and outputs as it is called;
- ``2``: also each op as it is recorded: name, inputs and outputs with shapes, device;
- ``3``: also the user's source line that issued each op.
"""

from __future__ import annotations

from flowserve._repr import meta_repr
from flowserve.utils.tree import flatten


class DebugPrinter:
    """Prints through the graph's tag ``(GRAPH:name:Class)`` at or below the set level."""

    def __init__(self, graph, v_level: int, max_py_stack_depth: int):
        self.graph = graph
        self.v_level = v_level
        self.max_py_stack_depth = max_py_stack_depth
        self.values = {}

    @property
    def tag(self) -> str:
        return f"(GRAPH:{self.graph.name}:{type(self.graph).__name__})"

    def log(self, level: int, message: str) -> None:
        if self.v_level >= level:
            print(f"{self.tag} {message}", flush=True)

    def attach(self, tracer) -> None:
        self.values = tracer.ir.values
        if self.v_level >= 1:
            tracer.on_module_call = self.on_module_call
        if self.v_level >= 2:
            tracer.on_op = self.on_op

    def on_module_call(self, event: str, name: str, module, payload) -> None:
        head = f"(MODULE:{name}:{type(module).__name__}({module.extra_repr()}))"
        if event == "enter":
            lines = [f"{head} start building module."]
            lines += [f"  (INPUT:_{name}-input_{i}:{meta_repr(t)})" for i, t in enumerate(_tensors(payload))]
            lines += [f"  (PARAMETER:{name}.{k}:{meta_repr(p, lazy=False)})"
                      for k, p in module._parameters.items() if p is not None]
            lines += [f"  (BUFFER:{name}.{k}:{meta_repr(b, lazy=False)})"
                      for k, b in module._buffers.items() if b is not None]
        else:
            lines = [f"  (OUTPUT:_{name}-output_{i}:{meta_repr(t)})" for i, t in enumerate(_tensors(payload))]
            lines.append(f"{head} end building module.")
        print("\n".join(lines), flush=True)

    def on_op(self, node) -> None:
        ins = ", ".join(f"{n}:{self._meta(n)}" for n in node.inputs)
        outs = ", ".join(f"{n}:{self._meta(n)}" for n in node.outputs)
        scope = node.scope or self.graph.name
        print(f"(OPERATOR: {scope}/{node.op}({ins}) -> ({outs}), device=cpu, attrs={node.attrs})", flush=True)
        if self.v_level >= 3 and node.loc:
            frames = node.loc.split("\n")[: max(1, self.max_py_stack_depth)]
            print("".join(f"    (LOCATION: {f})\n" for f in frames), end="", flush=True)

    def _meta(self, name: str) -> str:
        v = self.values.get(name)
        return f"(size={tuple(v.shape)}, dtype=flowserve.{v.dtype})" if v is not None else "()"


def _tensors(payload) -> list:
    return flatten(payload)[0]
