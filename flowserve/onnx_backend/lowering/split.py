"""Graph mode on CUDA: the slices that cut one tensor into consecutive pieces as one ``Split``.

The fused model update (``flowserve.nn.graph.fused_update``) gives every parameter and
state its piece of a flat buffer back with one ``slice`` each: 161 ``Slice`` kernels per
buffer in ResNet-50's step. Where slices of one tensor along axis 0 with step 1 follow each
other from 0 (``[0:a], [a:b], [b:c], ...``), one ``Split`` writes all of them: the same
elements, one kernel. A gap between two slices is no match; a tail no slice reads is one
more ``Split`` output that nothing reads.
"""

from __future__ import annotations

from onnx import helper, numpy_helper


def _ints(b, name: str) -> list | None:
    tensor = b.initializers.get(name)
    return None if tensor is None else [int(v) for v in numpy_helper.to_array(tensor).reshape(-1)]


def _range(b, node) -> tuple | None:
    """``(start, end)`` of a ``Slice`` along axis 0 with step 1 and constant bounds, else None."""
    if node.op_type != "Slice" or len(node.input) < 4:
        return None
    starts, ends, axes = (_ints(b, n) for n in node.input[1:4])
    steps = _ints(b, node.input[4]) if len(node.input) > 4 and node.input[4] else [1]
    if starts is None or ends is None or axes != [0] or steps != [1] or len(starts) != 1 or len(ends) != 1:
        return None
    return starts[0], ends[0]


def merge_slices_into_split(b, values: dict) -> int:
    """Rewrite builder ``b``'s nodes in place; ``values``: the IR's value metadata (the
    sliced tensors' shapes). Returns how many ``Split`` nodes it made."""
    groups: dict = {}  # sliced tensor -> [(start, end, node)]
    for node in b.nodes:
        found = _range(b, node)
        if found is not None and node.input[0] in values:
            groups.setdefault(node.input[0], []).append((*found, node))
    made, replaced = 0, {}
    for data, pieces in groups.items():
        pieces.sort(key=lambda p: p[0])
        length = int(values[data].shape[0]) if values[data].shape else 0
        bounds = [0] + [end for _, end, _ in pieces]
        if len(pieces) < 2 or [start for start, _, _ in pieces] != bounds[:-1] or not 0 < bounds[-1] <= length \
                or any(end <= start for start, end, _ in pieces):
            continue
        sizes = [end - start for start, end, _ in pieces]
        outputs = [node.output[0] for _, _, node in pieces]
        if bounds[-1] < length:
            sizes.append(length - bounds[-1])
            outputs.append(b.fresh(f"{data}/split_tail"))
        split = helper.make_node("Split", [data, b.const(sizes)], outputs, name=f"{data}/split", axis=0)
        first = min(b.nodes.index(node) for _, _, node in pieces)
        replaced[id(b.nodes[first])] = split
        replaced.update({id(node): None for _, _, node in pieces if node is not b.nodes[first]})
        made += 1
    if made:
        bounds = {name for node in b.nodes if id(node) in replaced for name in node.input[1:]}
        b.nodes[:] = [replaced.get(id(n), n) for n in b.nodes if replaced.get(id(n), n) is not None]
        still_read = {name for node in b.nodes for name in node.input}
        b.drop_initializers(bounds - still_read)  # the slices' starts/ends nothing else reads
    return made
