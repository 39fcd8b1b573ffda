"""``graph.debug(v_level)``: what nn.Graph prints while it builds and compiles.

- ``v_level=0``: the build stages and their times, peak memory of the first run;
- ``1``: also each module's inputs, parameters, buffers and outputs as it is called;
- ``2``: also each op as it is recorded: name, inputs and outputs with shapes, device;
- ``3``: also the user's source line that issued each op.

With the environment variable ``ONEFLOW_DEBUG_MODE`` set (``1``/``true``), a training graph
also writes the learning rate of each of its steps to ``log/<rank>/train_step2lr.csv``, as
OneFlow does: a ``train_step,lr`` header, then one ``step,lr`` line per call, the rate that
call's update used (the first optimizer's first parameter group). Each graph starts the file
afresh at its first call.
"""

from __future__ import annotations

import os
from pathlib import Path

from flowserve._repr import meta_repr
from flowserve.utils.tree import flatten

DEBUG_MODE_ENV = "ONEFLOW_DEBUG_MODE"
LR_LOG_NAME = "train_step2lr.csv"


def debug_mode() -> bool:
    """Whether ``ONEFLOW_DEBUG_MODE`` is set to a true value (``1``, ``true``, ``yes``, ``on``)."""
    return os.environ.get(DEBUG_MODE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


class LearningRateLog:
    """``log/<rank>/train_step2lr.csv`` of one training graph (see the module's docstring)."""

    def __init__(self, rank: int, root: str = "log"):
        self.path = Path(root) / str(rank) / LR_LOG_NAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("train_step,lr\n")

    def write(self, step: int, lr: float) -> None:
        with self.path.open("a") as f:
            f.write(f"{step},{float(lr)!r}\n")


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
