"""``print(graph)``: OneFlow's tagged tree (GRAPH / CONFIG / MODULE / PARAMETER / BUFFER /
INPUT / OUTPUT).

Before the first call it shows the structure; after it, the graph's inputs and outputs
and, inside each module, the inputs and outputs of its first call, as lazy tensors::

    (GRAPH:GraphMobileNetV2_0:GraphMobileNetV2): (
      (CONFIG:config:GraphConfig(training=True, ))
      (INPUT:_GraphMobileNetV2_0-input_0:tensor(..., size=(64, 3, 32, 32), dtype=flowserve.float32))
      (MODULE:model:MobileNetV2()): (
        (INPUT:_model-input_0:tensor(..., is_lazy='True', size=(64, 3, 32, 32), dtype=flowserve.float32))
        ...
"""

from __future__ import annotations

from flowserve._repr import meta_repr
from flowserve.utils.tree import flatten


def _module_io(graph) -> dict:
    """Module name -> (inputs, outputs) of its first call in the last compiled trace."""
    compiled = graph.parts.last
    io = {}
    if compiled is not None:
        for name, _module, args, out in compiled.traced.module_calls:
            io.setdefault(name, (flatten(args)[0], flatten(out)[0]))
    return io


def _module_lines(module, name: str, indent: str, io: dict, options: dict) -> list[str]:
    head = f"{type(module).__name__}({module.extra_repr()})"
    lines = [f"{indent}(MODULE:{name}:{head}): ("]
    inner = indent + "  "
    ins, outs = io.get(name, ([], []))
    lines += [f"{inner}(INPUT:_{name}-input_{i}:{meta_repr(t, lazy=True)})" for i, t in enumerate(ins)]
    gm = options.get(name)
    if gm is not None and gm.options():
        lines.append(f"{inner}{gm!r}")
    for pname, p in module._parameters.items():
        if p is not None:
            lines.append(f"{inner}(PARAMETER:{name}.{pname}:{meta_repr(p, lazy=False)}): ()")
    for bname, b in module._buffers.items():
        if b is not None:
            lines.append(f"{inner}(BUFFER:{name}.{bname}:{meta_repr(b, lazy=False)}): ()")
    for cname, child in module._modules.items():
        if child is not None:
            lines += _module_lines(child, f"{name}.{cname}", inner, io, options)
    lines += [f"{inner}(OUTPUT:_{name}-output_{i}:{meta_repr(t, lazy=True)})" for i, t in enumerate(outs)]
    if len(lines) == 1:
        return [lines[0] + ")"]  # nothing inside: ``(MODULE:name:ReLU()): ()``
    lines.append(f"{indent})")
    return lines


def graph_repr(graph) -> str:
    lines = [f"(GRAPH:{graph.name}:{type(graph).__name__}): ("]
    lines.append(f"  (CONFIG:config:{graph.config!r})")
    compiled = graph.parts.last
    choice = getattr(compiled, "engine_choice", None)  # single-session graphs choose their engine
    if choice is not None:
        lines.append(f"  (ENGINE:{choice.describe()})")
    if compiled is not None:
        for i, v in enumerate(compiled.traced.ir.inputs):
            lines.append(f"  (INPUT:_{graph.name}-input_{i}:{_value_repr(v)})")
    io, options = _module_io(graph), graph.graph_modules()
    for name, module in graph.original_modules().items():
        lines += _module_lines(module, name, "  ", io, options)
    if compiled is not None:
        for i, v in enumerate(compiled.traced.ir.outputs):
            lines.append(f"  (OUTPUT:_{graph.name}-output_{i}:{_value_repr(v)})")
    lines.append(")")
    return "\n".join(lines)


def _value_repr(v) -> str:
    return f"tensor(..., size={tuple(v.shape)}, dtype=flowserve.{v.dtype})"
