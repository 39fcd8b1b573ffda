"""``print(graph)``: OneFlow's tagged tree (GRAPH / CONFIG / MODULE / PARAMETER / BUFFER /
INPUT / OUTPUT)."""

from __future__ import annotations

from flowserve._repr import meta_repr


def _module_lines(module, name: str, indent: str) -> list[str]:
    head = f"{type(module).__name__}({module.extra_repr()})"
    lines = [f"{indent}(MODULE:{name}:{head}): ("]
    inner = indent + "  "
    for pname, p in module._parameters.items():
        if p is not None:
            lines.append(f"{inner}(PARAMETER:{name}.{pname}:{meta_repr(p, lazy=False)}): ()")
    for bname, b in module._buffers.items():
        if b is not None:
            lines.append(f"{inner}(BUFFER:{name}.{bname}:{meta_repr(b, lazy=False)}): ()")
    for cname, child in module._modules.items():
        if child is not None:
            lines += _module_lines(child, f"{name}.{cname}", inner)
    lines.append(f"{indent})")
    return lines


def graph_repr(graph) -> str:
    lines = [f"(GRAPH:{graph.name}:{type(graph).__name__}): ("]
    lines.append(f"  (CONFIG:config:{graph.config!r})")
    compiled = graph._last
    if compiled is not None:
        for v in compiled.traced.ir.inputs:
            lines.append(f"  (INPUT:_{graph.name}-input_{v.name}:{_value_repr(v)})")
    for name, module in graph._original_modules().items():
        lines += _module_lines(module, name, "  ")
    if compiled is not None:
        for v in compiled.traced.ir.outputs:
            lines.append(f"  (OUTPUT:_{graph.name}-output_{v.name}:{_value_repr(v)})")
    lines.append(")")
    return "\n".join(lines)


def _value_repr(v) -> str:
    return f"tensor(..., size={tuple(v.shape)}, dtype=flowserve.{v.dtype})"
