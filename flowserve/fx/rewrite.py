"""``flow.fx.replace_pattern``: rewrite every occurrence of a traced pattern in a
``GraphModule``'s graph with a traced replacement, as OneFlow's (and ``torch.fx``'s) subgraph
rewriter does.

>>> import flowserve as flow
>>> class M(flow.nn.Module):
...     def forward(self, x, y):
...         return flow.neg(x) + y
>>> gm = flow.fx.symbolic_trace(M())
>>> matches = flow.fx.replace_pattern(gm, lambda a, b: flow.neg(a) + b, lambda a, b: b - a)
>>> len(matches), "neg" in gm.code, gm(flow.tensor([1.0]), flow.tensor([3.0])).tolist()
(1, False, [2.0])
"""

from __future__ import annotations

from dataclasses import dataclass, field

from flowserve.fx.graph import Graph, GraphModule, Node, TraceError, _map_nodes
from flowserve.fx.tracer import symbolic_trace


@dataclass
class Match:
    """One occurrence of the pattern: ``anchor`` is the graph node that matched the pattern's
    result, ``nodes_map`` maps each pattern node to the graph node it matched."""

    anchor: Node
    nodes_map: dict = field(default_factory=dict)


def replace_pattern(gm: GraphModule, pattern, replacement) -> list[Match]:
    """Replace each occurrence of ``pattern`` (a function or module, traced symbolically) in
    ``gm.graph`` by ``replacement`` (the same inputs, in the same order), then recompile ``gm``.
    An occurrence is a set of nodes doing what the pattern does, whose values nothing outside
    it reads except its result; occurrences do not overlap. Returns the matches made."""
    pattern_graph = symbolic_trace(pattern).graph
    replacement_graph = symbolic_trace(replacement).graph
    anchor = _single_output(pattern_graph, "pattern")
    _single_output(replacement_graph, "replacement")
    matches = []
    for node in list(gm.graph.nodes):
        if node.graph is not gm.graph or node not in gm.graph.nodes:
            continue  # erased by an earlier replacement
        found = Match(node)
        if _matches(anchor, node, found.nodes_map) and _self_contained(found, anchor):
            _substitute(gm.graph, found, pattern_graph, replacement_graph)
            matches.append(found)
    gm.graph.lint()
    gm.recompile()
    return matches


def _single_output(graph: Graph, what: str) -> Node:
    result = graph.nodes[-1].args[0]
    if not isinstance(result, Node):
        raise TraceError(f"replace_pattern: the {what} must return one traced value, got {result!r}")
    return result


def _matches(p: Node, g: Node, mapping: dict) -> bool:
    """Whether graph node ``g`` computes what pattern node ``p`` does, binding pattern inputs."""
    if p in mapping:
        return mapping[p] is g
    if p.op == "placeholder":
        if any(g is v for k, v in mapping.items() if k.op != "placeholder"):
            return False  # an input of the pattern cannot be a value computed inside the occurrence
        mapping[p] = g
        return True
    if (p.op, p.target) != (g.op, g.target) or len(p.args) != len(g.args) or p.kwargs.keys() != g.kwargs.keys():
        return False
    mapping[p] = g
    pairs = list(zip(p.args, g.args)) + [(p.kwargs[k], g.kwargs[k]) for k in p.kwargs]
    if all(_args_match(pa, ga, mapping) for pa, ga in pairs):
        return True
    del mapping[p]
    return False


def _args_match(pa, ga, mapping: dict) -> bool:
    if isinstance(pa, Node) or isinstance(ga, Node):
        return isinstance(pa, Node) and isinstance(ga, Node) and _matches(pa, ga, mapping)
    if isinstance(pa, (list, tuple)) and isinstance(ga, (list, tuple)):
        return len(pa) == len(ga) and all(_args_match(a, b, mapping) for a, b in zip(pa, ga))
    return type(pa) is type(ga) and pa == ga


def _self_contained(found: Match, anchor: Node) -> bool:
    """No value inside the occurrence, its result apart, is read from outside it."""
    inner = {g for p, g in found.nodes_map.items() if p.op != "placeholder"}
    return all(set(g.users) <= inner for p, g in found.nodes_map.items()
               if p.op != "placeholder" and p is not anchor)


def _substitute(graph: Graph, found: Match, pattern: Graph, replacement: Graph) -> None:
    """Copy ``replacement``'s nodes in before the anchor, its inputs bound to what the
    pattern's inputs matched (by position), then drop the occurrence's nodes."""
    pattern_inputs = [n for n in pattern.nodes if n.op == "placeholder"]
    replacement_inputs = [n for n in replacement.nodes if n.op == "placeholder"]
    if len(pattern_inputs) != len(replacement_inputs):
        raise TraceError(f"replace_pattern: the pattern takes {len(pattern_inputs)} inputs and the replacement "
                         f"{len(replacement_inputs)}; they must take the same")
    copied = {r: found.nodes_map[p] for r, p in zip(replacement_inputs, pattern_inputs)}
    at = graph.nodes.index(found.anchor)
    for node in replacement.nodes:
        if node.op in ("placeholder", "output"):
            continue
        copied[node] = graph.create_node(node.op, node.target, _map_nodes(node.args, copied.get),
                                         _map_nodes(node.kwargs, copied.get), name=node.name, index=at)
        at += 1
    found.anchor.replace_all_uses_with(copied[replacement.nodes[-1].args[0]])
    doomed = [g for p, g in found.nodes_map.items() if p.op != "placeholder"]
    for g in sorted(doomed, key=graph.nodes.index, reverse=True):
        graph.erase_node(g)
