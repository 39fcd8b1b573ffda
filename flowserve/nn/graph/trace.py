"""Tracing ``build()`` into a ``GraphIR``: inputs, state, micro-batches, loss scaling,
optimizer updates, outputs. The trace is a value (``Traced``): it changes nothing on the
graph, and carries what the later stages need, the batch marks included (which input
and output dims hold the batch, ``BatchMarks``). The graph passes run after it
(``flowserve.nn.graph.lifecycle``)."""

from __future__ import annotations

import inspect
from contextlib import nullcontext
from dataclasses import dataclass, field

from flowserve import dtypes
from flowserve.autograd.grad_mode import no_grad, set_grad_enabled
from flowserve.device import CPU
from flowserve.errors import GraphError
from flowserve.ir.graph import GraphIR
from flowserve.ir.passes import eliminate_dead_code, name_outputs
from flowserve.ir.tracer import Tracer
from flowserve.nn.graph.optimizer_reads import (
    OptimizerReads,
    forget_unused_state,
    live_reads,
    optimizer_options,
    register_optimizer_reads,
)
from flowserve.nn.graph.signature import batch_size
from flowserve.nn.graph.update import apply_optimizers
from flowserve.ops import functional as ops_functional
from flowserve.ops.creation import default_generator
from flowserve.ops.dims import BatchDim
from flowserve.ops.random import RANDOM_PRIMITIVES
from flowserve.utils.tree import flatten, leaf_names, unflatten

TRAIN_STEP = "System-Train-TrainStep"
LOSS_SCALE = "System-Train-LossScale"


@dataclass(frozen=True)
class BatchMarks:
    """Which dims of a trace's inputs and outputs hold the batch itself (dim 0 of inputs
    that share it, traced as a ``BatchDim``; the output dims that kept that mark), and its
    traced ``size``. Empty when the inputs share no dim 0."""

    size: int | None = None
    inputs: dict = field(default_factory=dict)  # input name -> axes holding the batch (every input)
    outputs: dict = field(default_factory=dict)  # output name -> axes holding the batch

    @classmethod
    def of(cls, ir: GraphIR, size: int | None) -> "BatchMarks":
        if size is None:
            return cls()

        def marked(v) -> tuple:
            return tuple(i for i, d in enumerate(v.shape) if isinstance(d, BatchDim) and not d.steps)

        return cls(int(size), {v.name: marked(v) for v in ir.inputs},
                   {v.name: marked(v) for v in ir.outputs if marked(v)})

    @property
    def batched_inputs(self) -> bool:
        """Whether every input has the batch in dim 0 (there is at least one input)."""
        return bool(self.inputs) and all(0 in axes for axes in self.inputs.values())


@dataclass
class Traced:
    """A traced build: the IR, the eager tensors behind its state, how to feed it."""

    ir: GraphIR
    constants: dict
    state: dict  # state name -> eager tensor (parameters, buffers, optimizer state, train step)
    system_feeds: dict = field(default_factory=dict)  # state name -> () -> value (learning rates, seeds)
    in_spec: object = None
    out_spec: object = None
    module_calls: list = field(default_factory=list)
    batch_marks: BatchMarks = field(default_factory=BatchMarks)
    forward_values: frozenset = frozenset()  # values computed by forward ops (activation checkpointing, stages)
    optimizer_options: tuple = ()  # each group's options the compiled update uses (optimizer_reads)

    def prune_state(self) -> None:
        """Keep only the state, constants and feeds the IR still reads (after passes)."""
        for table in (self.state, self.constants, self.system_feeds):
            for name in [k for k in table if k not in self.ir.state]:
                del table[name]


def input_names(build, leaves_count: int, spec) -> list[str]:
    """Names of the flattened inputs: build()'s parameter names where one input each."""
    params = [p for p in inspect.signature(build).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    args_spec = spec[1][0][1]  # spec of (args, kwargs) -> args list
    names, used = [], set()
    for i, s in enumerate(args_spec):
        base = params[i].name if i < len(params) else f"input_{i}"
        sub = [base] if s[0] == "leaf" else [f"{base}.{j}" for j in range(len(leaf_names(s, base)))]
        names += sub
    for k, s in spec[1][1][1]:
        names += [k] if s[0] == "leaf" else [f"{k}.{j}" for j in range(len(leaf_names(s)))]
    for i, n in enumerate(names):
        if n in used:
            names[i] = f"{n}_{i}"
        used.add(names[i])
    if len(names) != leaves_count:
        raise GraphError(f"could not name the {leaves_count} graph inputs")
    return names


def unique_output_names(names: list[str], taken) -> list[str]:
    """Output names that collide with no input, state or other value of the graph, nor with
    each other (``{"x": x}`` returned for input ``x`` becomes output ``x_output``)."""
    used, out = set(taken), []
    for name in names:
        unique, n = name, 0
        while unique in used:
            n += 1
            unique = f"{name}_output" if n == 1 else f"{name}_output_{n}"
        used.add(unique)
        out.append(unique)
    return out


def register_state(tracer: Tracer, graph) -> None:
    seen = set()
    for attr, module in graph.original_modules().items():
        for name, p in module.named_parameters(prefix=attr):
            if id(p) not in seen:
                seen.add(id(p))
                tracer.add_state(name, p, "parameter")
        for name, b in module.named_buffers(prefix=attr):
            if id(b) not in seen:
                seen.add(id(b))
                tracer.add_state(name, b, "buffer")


def _scaler_state(tracer: Tracer, graph) -> dict:
    """Register the grad scaler's state; the loss scale becomes the backward seed."""
    scaler = graph.parts.grad_scaler
    if scaler is None or not getattr(scaler, "is_enabled", lambda: True)():
        return {}
    lazy = {}
    for key, tensor in scaler.graph_state().items():
        name = LOSS_SCALE if key == "scale" else f"{LOSS_SCALE}-{key}"
        lazy[key] = tracer.add_state(name, tensor, "system")
    if "scale" not in lazy:
        lazy["scale"] = tracer.lift(scaler._scale)
    return lazy


def _micro_batches(inputs: list, steps: int, names: list[str]) -> list[list]:
    if steps == 1:
        return [inputs]
    for t, name in zip(inputs, names):
        if t.ndim == 0 or t.shape[0] % steps:
            raise GraphError(
                f"gradient accumulation over {steps} micro-batches splits every input along dim 0, "
                f"but input {name!r} has size {tuple(t.shape)}")
    sizes = [t.shape[0] // steps for t in inputs]
    return [[ops_functional.slice_axis(t, 0, i * n, (i + 1) * n) for t, n in zip(inputs, sizes)] for i in range(steps)]


def _run_build(graph, tracer: Tracer, lazy_inputs: list, spec, names: list[str], steps: int):
    """Run build() once per micro-batch; outputs of several micro-batches are stacked."""
    results, out_spec = [], None
    for micro in _micro_batches(lazy_inputs, steps, names):
        lazy_args, lazy_kwargs = unflatten(spec, micro)
        out = graph.build(*lazy_args, **lazy_kwargs)
        leaves, out_spec = flatten(out)
        results.append(leaves)
    if steps == 1:
        return results[0], out_spec
    return [ops_functional.stack(list(group)) for group in zip(*results)], out_spec


def _loss_scale(graph, scaler_state: dict, steps: int):
    """The backward seed: the grad scaler's scale, times ``1/steps`` for accumulation."""
    scale = scaler_state.get("scale")
    if steps > 1:
        scale = (scale * (1.0 / steps) if scale is not None
                 else ops_functional.scalar_tensor(1.0 / steps, dtypes.float32, CPU))
    return scale


def trace_build(graph, args: tuple, kwargs: dict, names: list[str] | None = None, on_start=None) -> Traced:
    """Run ``graph.build`` once on lazy inputs; returns what it recorded. ``on_start(tracer)``
    attaches the caller's observers (warnings, debug printing) before ``build()`` runs."""
    leaves, spec = flatten((args, kwargs))
    names = names or input_names(graph.build, len(leaves), spec)
    tracer = Tracer(graph.name)
    tracer.module_names = graph.module_names()
    tracer.batch = batch_size(leaves)
    if on_start is not None:
        on_start(tracer)
    steps = graph.config.gradient_accumulation_steps if graph.training else 1
    system_feeds: dict = {}
    with tracer, set_grad_enabled(graph.training):
        lazy_inputs = [tracer.add_input(n, t.meta) for n, t in zip(names, leaves)]
        register_state(tracer, graph)
        reads = register_optimizer_reads(tracer, graph, system_feeds) if graph.training else OptimizerReads()
        scaler_state = _scaler_state(tracer, graph) if graph.training else {}
        tracer.loss_scale = _loss_scale(graph, scaler_state, steps)
        with live_reads(tracer, graph, reads) if graph.training else nullcontext():
            out_leaves, out_spec = _run_build(graph, tracer, lazy_inputs, spec, names, steps)
        if graph.training:
            apply_optimizers(tracer, graph, scaler_state)
            step = tracer.add_state(TRAIN_STEP, graph.parts.train_step, "system")
            with no_grad():
                step.copy_(step + 1)
        out_leaves = [tracer.lift(t) for t in out_leaves]
    ir = tracer.ir
    ir.updates = tracer.state_updates()
    if any(node.op in RANDOM_PRIMITIVES and node.op != "uniform_seeded" for node in ir.nodes):
        ir.attrs["random_seed"] = graph_seed()  # ops given a generator= draw from its per-call seed
    name_outputs(ir, [t._lazy.name for t in out_leaves], unique_output_names(leaf_names(out_spec), ir.values))
    eliminate_dead_code(ir)
    forget_unused_state(tracer, reads, ir)
    system_feeds.update(tracer.system_feeds)
    traced = Traced(ir, dict(tracer.constants), dict(tracer.state_eager), system_feeds, spec, out_spec,
                    tracer.module_calls, BatchMarks.of(ir, tracer.batch), frozenset(tracer.forward_values))
    traced.prune_state()
    if graph.training:
        traced.optimizer_options = optimizer_options(graph)
    return traced


def graph_seed() -> int:
    """The seed of a traced graph's random nodes, drawn from flowserve's default generator
    (so ``flow.manual_seed`` before the first call makes a graph's draws repeatable)."""
    return int(default_generator.rng.integers(1 << 31))
