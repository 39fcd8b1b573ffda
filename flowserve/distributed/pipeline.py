"""Pipeline stages (``graph.m.to(GraphModule).set_stage(stage_id, placement)``) across
processes: each rank runs the nodes of its stage, activations and gradients travel by
send/recv, micro-batches come from ``config.set_gradient_accumulation_steps(n)``.

Stage of each node of the traced step (``assign_stages``, run by the graph passes):

- nodes that read only inputs, constants and system state (micro-batch slicing, the
  backward seed, the train-step counter) run on every rank (every rank is fed the batch);
- forward nodes inside a staged module run on that stage;
- other nodes follow the values they read: a backward or update node runs on the
  earliest stage among the parameters, states and forward activations it reads (its
  forward op's stage), a forward node outside the staged modules (the loss) on the latest.

Each rank orders its nodes forward first (every micro-batch), then backward and update:
GPipe's schedule. Its nodes become ONNX Runtime sessions cut where a value must be
received; values go out as soon as the session that makes them ends. At the end of a step
the owner of each updated state broadcasts it, so every rank's modules hold the whole
trained model (``state_dict()`` and ``flow.save`` from rank 0 work as in one process).
"""

from __future__ import annotations

import numpy as np

from flowserve import dtypes, env
from flowserve.distributed.segments import Segment, initial_values, write_back
from flowserve.distributed.stages import FORWARD_ATTR, stage_ranks
from flowserve.distributed.stages import ATTR as STAGES_ATTR
from flowserve.errors import GraphError
from flowserve.ir.graph import GraphIR

class PipelineGraph:
    """The compiled step of a graph with pipeline stages on this rank (``CompiledGraph``'s
    calling interface)."""

    dynamic_batch = False

    def __init__(self, traced, training: bool, options: dict | None = None, key=None, communicator=None):
        self.traced, self.training, self.options, self.key = traced, training, options or {}, key
        self.batch, self.peak_memory = None, None
        self.comm = communicator or env.communicator()
        ir = traced.ir
        stages = ir.attrs["stages"]
        self.rank_of = stage_ranks(stages)
        if sorted(self.rank_of.values()) != list(range(self.comm.world_size)):
            raise GraphError(f"pipeline stages run on ranks {sorted(self.rank_of.values())}, but the world has "
                             f"{self.comm.world_size} ranks: give each rank one stage")
        self.stage_of = ir.attrs[STAGES_ATTR]
        self.mine = {s for s, r in self.rank_of.items() if r == self.comm.rank}
        self.node_stage = {id(n): self.stage_of.get(n.outputs[0]) for n in ir.nodes}
        self.value_stage = {o: self.node_stage[id(n)] for n in ir.nodes for o in n.outputs}
        self.cross = self._cross_stage_values(ir)
        self.plan = self._plan(ir)

    def _runs_here(self, node) -> bool:
        stage = self.node_stage[id(node)]
        return stage is None or stage in self.mine

    def _cross_stage_values(self, ir: GraphIR) -> dict:
        """Value -> ranks that read it but do not make it (in one order on every rank)."""
        cross: dict = {}
        for node in ir.nodes:
            stage = self.node_stage[id(node)]
            for name in node.inputs:
                src = self.value_stage.get(name)
                if src is None or stage is None or self.rank_of[src] == self.rank_of[stage]:
                    continue
                cross.setdefault(name, [])
                if self.rank_of[stage] not in cross[name]:
                    cross[name].append(self.rank_of[stage])
        return cross

    def _ordered_nodes(self, ir: GraphIR) -> list:
        """This rank's nodes, every micro-batch's forward before any backward (GPipe)."""
        forward_values = set(ir.attrs.get(FORWARD_ATTR, ()))
        mine = [n for n in ir.nodes if self._runs_here(n)]
        first = [n for n in mine if n.outputs[0] in forward_values]
        return first + [n for n in mine if n.outputs[0] not in forward_values]

    def _plan(self, ir: GraphIR) -> list:
        """Steps ``("run", segment)``, ``("send", value, [ranks])``, ``("recv", value, rank)``."""
        steps, chunk, received = [], [], set()
        for node in self._ordered_nodes(ir):
            for name in node.inputs:
                src = self.value_stage.get(name)
                if src is not None and src not in self.mine and name not in received:
                    steps += self._chunk_steps(chunk)
                    chunk = []
                    steps.append(("recv", name, self.rank_of[src]))
                    received.add(name)
            chunk.append(node)
        steps += self._chunk_steps(chunk)
        chunks = [step[1] for step in steps if step[0] == "run"]
        made_in = {o: i for i, nodes in enumerate(chunks) for n in nodes for o in n.outputs}
        later = {v.name for v in ir.outputs} | set(ir.updates.values()) | set(self.cross)
        for i, nodes in enumerate(chunks):
            later.update(name for n in nodes for name in n.inputs if made_in.get(name, i) != i)
        segments = iter(Segment(ir, i, nodes, later, self.traced.constants, self.options)
                        for i, nodes in enumerate(chunks))
        return [("run", next(segments)) if step[0] == "run" else step for step in steps]

    def _chunk_steps(self, chunk: list) -> list:
        if not chunk:
            return []
        steps = [("run", chunk)]
        for node in chunk:
            steps += [("send", o, self.cross[o]) for o in node.outputs
                      if o in self.cross and self.value_stage[o] in self.mine]
        return steps

    @property
    def state(self) -> dict:
        return self.traced.state

    def describe(self) -> str:
        stages = ", ".join(str(s) for s in sorted(self.mine, key=str))
        return f"pipeline (stage {stages} on rank {self.comm.rank} of {self.comm.world_size})"

    def run(self, inputs: list) -> list:
        values = initial_values(self.traced, inputs)
        tags = {name: i for i, name in enumerate(self.cross)}
        sending = []  # sends never block: with one node order on every rank, no rank waits on itself
        for step in self.plan:
            if step[0] == "run":
                step[1].run(values)
            elif step[0] == "send":
                sending += [self.comm.send(values[step[1]], dst, tag=tags[step[1]]) for dst in step[2]]
            else:
                meta = self.traced.ir.values[step[1]]
                buffer = np.empty(tuple(meta.shape), _np_dtype(meta.dtype))
                values[step[1]] = self.comm.recv(buffer, step[2], tag=tags[step[1]])
        for handle in sending:
            handle.wait()
        self._share_results(values)
        return write_back(self.traced, values)

    def _share_results(self, values: dict) -> None:
        """Outputs and updated states go from the rank that made them to every rank."""
        ir = self.traced.ir
        for name in [v.name for v in ir.outputs] + list(ir.updates.values()):
            stage = self.value_stage.get(name)
            if stage is None:
                continue
            meta = ir.values[name]
            if stage not in self.mine:
                values[name] = np.empty(tuple(meta.shape), _np_dtype(meta.dtype))
            values[name] = self.comm.broadcast(np.array(values[name], copy=True, order="C"), self.rank_of[stage])


def _np_dtype(name: str):
    return dtypes.from_name(name).np
