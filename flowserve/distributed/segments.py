"""A compiled ``nn.Graph`` whose IR holds collectives: ONNX Runtime sessions between them.

Each node gets a segment: the number of collectives on its longest path from the
inputs. Segment ``k`` is one ONNX Runtime session over the non-collective nodes of that
segment; after it runs, the collectives of segment ``k`` run on the communicator (every
``all_reduce`` of a segment in flight at once: the gradient buckets), and their results
feed the later segments. Every rank runs the same IR, so the collectives meet in the same
order everywhere. State (parameters, buffers, optimizer state) is fed per call and its
new values written back into the eager tensors, as a one-session graph does.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

from flowserve import env
from flowserve.device import to_device_array
from flowserve.ir.graph import GraphIR, Node
from flowserve.onnx_backend import lower, providers
from flowserve.ops.collective import COLLECTIVES
from flowserve.tensor import Tensor

if TYPE_CHECKING:
    from flowserve.nn.graph.trace import Traced


def has_collectives(ir: GraphIR) -> bool:
    return any(node.op in COLLECTIVES for node in ir.nodes)


def segment_of_nodes(ir: GraphIR) -> list[int]:
    """Per node, its segment: how many collectives precede it on its longest input path."""
    produced_at: dict = {}  # value -> segment in which it is available
    segments = []
    for node in ir.nodes:
        seg = max((produced_at.get(name, 0) for name in node.inputs), default=0)
        segments.append(seg)
        for name in node.outputs:
            produced_at[name] = seg + 1 if node.op in COLLECTIVES else seg
    return segments


class Segment:
    """One session over some non-collective nodes: which values it reads and returns."""

    def __init__(self, ir: GraphIR, index: int, nodes: list[Node], needed_later: set, constants: dict,
                 options: dict):
        produced = {name for node in nodes for name in node.outputs}
        reads = list(dict.fromkeys(n for node in nodes for n in node.inputs if n not in produced))
        self.inputs = [n for n in reads if n not in constants]
        self.outputs = [n for node in nodes for n in node.outputs if n in needed_later]
        sub = GraphIR(f"{ir.name}_segment{index}")
        sub.inputs = [_meta(ir, n) for n in self.inputs]
        sub.outputs = [ir.values[n] for n in self.outputs]
        sub.nodes = nodes
        sub.values = {n: _meta(ir, n) for n in set(reads) | produced}
        baked = {n: constants[n] for n in reads if n in constants}
        self.session = _session(sub, baked, options)

    def run(self, values: dict) -> None:
        feeds = {n: np.asarray(values[n]) for n in self.inputs}
        for name, array in zip(self.outputs, self.session.run(self.outputs, feeds)):
            values[name] = array


def _session(sub: GraphIR, baked: dict, options: dict):
    # the node's cores are shared among the processes the launcher started on it
    local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
    return providers.create_session(lower.lower_ir(sub, baked), options=options, instances=local)


def _meta(ir: GraphIR, name: str):
    return ir.values.get(name) or ir.state[name]


class SegmentedGraph:
    """The ``CompiledGraph`` of an IR with collectives (same calling interface)."""

    dynamic_batch = False

    def __init__(self, traced: Traced, training: bool, options: dict | None = None, key=None,
                 communicator=None):
        self.traced, self.training, self.options, self.key = traced, training, options or {}, key
        self.batch = None
        self.peak_memory = None
        self.comm = communicator or env.communicator()
        ir = traced.ir
        self.update_names = list(ir.updates)
        seg_of = segment_of_nodes(ir)
        count = max(seg_of, default=0) + 1
        self.collectives = [[n for n, s in zip(ir.nodes, seg_of) if s == k and n.op in COLLECTIVES]
                            for k in range(count)]
        later = self._needed_later(ir)
        self.segments = []
        for k in range(count):
            nodes = [n for n, s in zip(ir.nodes, seg_of) if s == k and n.op not in COLLECTIVES]
            self.segments.append(Segment(ir, k, nodes, later, traced.constants, self.options) if nodes else None)
        self._broadcast_state()

    @staticmethod
    def _needed_later(ir: GraphIR) -> set:
        """Values read across a segment boundary, by a collective, or returned."""
        needed = {v.name for v in ir.outputs} | set(ir.updates.values())
        seg_of = segment_of_nodes(ir)
        made_in = {out: s for node, s in zip(ir.nodes, seg_of) for out in node.outputs}
        for node, s in zip(ir.nodes, seg_of):
            for name in node.inputs:
                if node.op in COLLECTIVES or made_in.get(name, s) != s:
                    needed.add(name)
        return needed

    def _broadcast_state(self) -> None:
        """Every rank starts from rank 0's state (parameters, buffers, optimizer state)."""
        if self.comm.world_size == 1:
            return
        for name in sorted(self.traced.state):
            t = self.traced.state[name]
            data = np.array(t.numpy(), copy=True, order="C")
            self.comm.broadcast(data, 0)
            t._set_value(to_device_array(data, t.device))  # its detach() aliases too

    def _run_collectives(self, nodes: list[Node], values: dict) -> None:
        pending = []
        for node in nodes:
            x = np.array(values[node.inputs[0]], copy=True, order="C")
            if node.op == "all_reduce":
                pending.append((node.outputs[0], self.comm.allreduce_async(x)))
            elif node.op == "reduce_scatter":
                values[node.outputs[0]] = self.comm.reduce_scatter(x)
            else:
                values[node.outputs[0]] = self.comm.all_gather(x)
        for name, handle in pending:
            values[name] = handle.wait()

    @property
    def state(self) -> dict:
        return self.traced.state

    def describe(self) -> str:
        return (f"segmented ({len(self.segments)} sessions between collectives, rank {self.comm.rank} of "
                f"{self.comm.world_size})")

    def run(self, inputs: list) -> list[Tensor]:
        values = initial_values(self.traced, inputs)
        for segment, collectives in zip(self.segments, self.collectives):
            if segment is not None:
                segment.run(values)
            self._run_collectives(collectives, values)
        return write_back(self.traced, values)


def initial_values(traced: Traced, inputs: list) -> dict:
    """Value name -> array: the call's inputs, the constants, the state (learning rates fed)."""
    values = {v.name: host_array(t) for v, t in zip(traced.ir.inputs, inputs)}
    values.update(traced.constants)
    for name, t in traced.state.items():
        feed = traced.system_feeds.get(name)
        values[name] = feed() if feed is not None else host_array(t)
    return values


def write_back(traced: Traced, values: dict) -> list[Tensor]:
    """The new state into the eager tensors (as a one-session graph leaves it); the outputs."""
    for name, value in traced.ir.updates.items():
        target = traced.state[name]
        target._set_value(to_device_array(np.array(values[value], copy=True), target.device))
    return [Tensor._wrap(np.array(values[v.name], copy=True)) for v in traced.ir.outputs]


def host_array(t: Tensor) -> np.ndarray:
    return np.asarray(t.numpy(), order="C")
