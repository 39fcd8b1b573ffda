"""Tracing: while ``nn.Graph.build`` runs, ``bind`` records IR nodes here.

Lazy tensors carry an IR ``Value``; eager tensors that reach an op are lifted: registered
state (parameters, buffers, optimizer state) maps to its state value, anything else
becomes a named constant. In-place updates of state rebind it to a new value, and the
difference between a state's first and last value is the graph's ``updates``.
"""

from __future__ import annotations

import os
import sys
import warnings
from contextlib import contextmanager

import numpy as np

from flowserve.autograd import tape
from flowserve.autograd.engine import backward
from flowserve.device import CPU
from flowserve.dispatch import (
    EVAL_NO_GRAD,
    Interpreter,
    Meta,
    current_interpreter,
    current_trace,
    infer_meta,
    pop_interpreter,
    push_interpreter,
)
from flowserve.distributed.global_tensor import graph_piece
from flowserve.errors import FlowserveError, GraphError
from flowserve.ir.graph import GraphIR, Node, Value
from flowserve.ops.dims import BatchDim, batch_positions
from flowserve.ops import functional as ops_functional
from flowserve.tensor import Tensor

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def user_location(depth: int = 1) -> str:
    """``file:line`` of the innermost frame outside flowserve (the user's code); with
    ``depth`` > 1, up to that many user frames, innermost first, one per line."""
    frame = sys._getframe(2)
    found: list[str] = []
    while frame is not None and len(found) < depth:
        path = frame.f_code.co_filename
        if not os.path.abspath(path).startswith(_PACKAGE_DIR):
            found.append(f"{path}:{frame.f_lineno}")
        frame = frame.f_back
    return "\n".join(found)


class LazyTensor(Tensor):
    """A tensor inside ``nn.Graph.build``: ``backward()`` seeds the gradient with the
    tracer's loss scale (gradient accumulation's ``1/n``, a grad scaler's scale). Users see
    it as a ``Tensor`` (its class name in Python's own error messages too)."""

    __slots__ = ()

    def backward(self, gradient=None, retain_graph: bool | None = None, create_graph: bool = False,
                 inputs=None) -> None:
        tracer = current_trace()
        scale = tracer.loss_scale if tracer is not None else None
        if gradient is None and scale is not None:

            gradient = ops_functional.expand(ops_functional.cast(scale, self.dtype), self.shape)
        if tracer is not None:
            tracer.losses.append(self)
        backward(self, gradient, retain_graph, create_graph, inputs)
        if tracer is not None:
            tracer.expose_grads()


class TraceInterpreter(Interpreter):
    """Graph mode: ``bind`` records an IR node into ``trace`` (and, with grad on, a tape
    node over the lifted inputs, from which ``backward()`` builds the symbolic backward)."""

    __slots__ = ("trace",)

    def __init__(self, trace: "Tracer", grad_enabled: bool):
        super().__init__(grad_enabled)
        self.trace = trace

    def process(self, prim, inputs, attrs) -> tuple:
        lifted, outputs = self.trace.record(prim, inputs, attrs, self.grad_enabled)
        if self.grad_enabled and prim.differentiable:
            tape.record_if_wanted(prim, lifted, outputs, attrs)
        return outputs

    def with_grad(self, enabled: bool) -> "TraceInterpreter":
        return TraceInterpreter(self.trace, enabled)


LazyTensor.__name__ = LazyTensor.__qualname__ = "Tensor"


class Tracer:
    """Records one graph. Use as ``with Tracer(name) as tr: ...``."""

    def __init__(self, name: str, device=None):
        self.ir = GraphIR(name)
        self.device = device
        self.state_tensors: dict[int, object] = {}  # id(eager tensor) -> lazy tensor
        self.state_eager: dict[str, object] = {}  # state name -> eager tensor (a global one's local piece)
        self.state_names: dict[int, str] = {}  # id(eager tensor), of a global one and its piece -> state name
        self.initial: dict[str, str] = {}  # state name -> its value name at the start
        self.constants: dict[str, np.ndarray] = {}
        self.scope: list[str] = []
        self.module_calls: list = []  # (scope, module, input metas, output) per call
        self.on_module_call = None
        self.module_names: dict[int, str] = {}  # id(module) -> full name, set by nn.Graph
        self._tokens: list = []  # context-variable tokens of the enclosing with-blocks
        self._keepalive: list = []  # lifted eager tensors stay alive so their ids stay unique
        self._counter = 0
        self.loss_scale = None  # lazy 0-d tensor multiplying the seed of backward()
        self.losses: list = []  # tensors backward() was called on
        self.forward_values: set = set()  # values computed by forward ops (not backward/update)
        self.on_op = None  # callback(node) after each recorded op (nn.Graph.debug)
        self.on_unregistered_module = None  # callback(module) for a module the graph does not hold
        self.stack_depth = 1  # user frames recorded per op (debug's max_py_stack_depth)
        self._unregistered_depth = 0
        self.batch = None  # the inputs' common dim 0: traced as a BatchDim when set
        self._eager_grads: dict = {}  # value name -> (eager tensor, its .grad before the trace)
        self._leaves: list = []  # (name, eager leaf that requires grad, its lazy leaf): see _constant
        self.system_feeds: dict = {}  # system state name -> () -> its value for each call
        self._generator_seeds: dict = {}  # id(generator) -> lazy int64 seed fed per call
        self.random_streams = 0  # seeded random nodes so far: each draws its own stream
        self._unliftable: dict[int, str] = {}  # id(eager tensor) -> why it may not become a constant

    def __enter__(self) -> "Tracer":
        current = current_interpreter()
        if current.trace is not None:
            raise GraphError("nn.Graph.build is already being traced; graphs cannot be nested")
        self._tokens.append(push_interpreter(TraceInterpreter(self, current.grad_enabled)))
        return self

    def __exit__(self, *exc) -> bool:
        pop_interpreter(self._tokens.pop())
        for eager, grad in self._eager_grads.values():
            eager.grad = grad
        return False

    @contextmanager
    def eagerly(self):
        """Run ops at once, unrecorded: for eager tensors made while tracing that outlive the
        trace (an optimizer's state, whose piece of a split global parameter is sliced)."""
        token = push_interpreter(EVAL_NO_GRAD)
        try:
            yield
        finally:
            pop_interpreter(token)

    def expose_grads(self) -> None:
        """After ``loss.backward()`` in build: each parameter's ``.grad`` is its symbolic
        gradient until the trace ends, so code that reads or clips ``p.grad`` (``clip_grad_norm_``)
        becomes part of the step, as in eager mode; so is that of a tensor made to require grad
        inside build() (``_constant``). The eager ``.grad`` comes back afterwards."""
        pairs = [(name, eager, self.state_tensors[id(eager)]) for name, eager in self.state_eager.items()]
        for name, eager, lazy in pairs + self._leaves:
            if lazy.grad is not None and eager.grad is not lazy.grad:
                self._eager_grads.setdefault(name, (eager, eager.grad))
                eager.grad = lazy.grad

    # -- values ---------------------------------------------------------------------------

    def fresh_name(self, op: str) -> str:
        self._counter += 1
        prefix = self.scope[-1] + "/" if self.scope else ""
        return f"{prefix}{op}_{self._counter}"

    def _lazy(self, value: Value, requires_grad: bool = False):
        t = Tensor._from_lazy(value, self.device or CPU)
        t.__class__ = LazyTensor
        t._requires_grad = requires_grad
        return t

    def add_input(self, name: str, meta: Meta):
        shape = tuple(meta.shape)
        if self.batch is not None and shape and shape[0] == self.batch:
            shape = (BatchDim(shape[0]),) + shape[1:]  # x.shape[0] stays the batch (flowserve.ops.dims)
        value = self.ir.add_value(Value(name, shape, meta.dtype.name))
        self.ir.inputs.append(value)
        return self._lazy(value)

    def add_state(self, name: str, eager, kind: str):
        """Register an eager tensor as graph state; ops on it will see its lazy twin. Of a
        global tensor the state is its local piece (``graph_piece``: in the one process it
        is the whole value), which each call reads and writes back."""
        piece = graph_piece(eager, self.ir.name) if eager.is_global else eager
        value = self.ir.add_value(Value(name, tuple(piece.shape), piece.dtype.name))
        self.ir.state[name] = value
        self.ir.state_kinds[name] = kind
        lazy = self._lazy(value, requires_grad=eager.requires_grad)
        self.state_tensors[id(eager)] = self.state_tensors[id(piece)] = lazy
        self.state_names[id(eager)] = self.state_names[id(piece)] = name
        self.state_eager[name] = piece
        self.initial[name] = name
        if piece is not eager:
            self._keepalive.append(eager)
        return lazy

    def generator_seed(self, generator):
        """The lazy int64 seed that ``generator`` feeds this graph on each call: one system
        input per generator, its value drawn from the generator before every run."""
        lazy = self._generator_seeds.get(id(generator))
        if lazy is None:
            name = f"System-Generator-{len(self._generator_seeds)}-Seed"
            lazy = self.add_state(name, Tensor._wrap(np.asarray(0, np.int64)), "system")
            self.system_feeds[name] = generator.draw_seed
            self._generator_seeds[id(generator)] = lazy
            self._keepalive.append(generator)
        return lazy

    def next_random_stream(self) -> int:
        self.random_streams += 1
        return self.random_streams

    def lazy_of(self, eager):
        return self.state_tensors.get(id(eager))

    def state_named(self, name: str):
        """The current lazy value of the registered state ``name`` (None if there is none)."""
        eager = self.state_eager.get(name)
        return None if eager is None else self.state_tensors[id(eager)]

    def refuse_constant(self, eager, why: str) -> None:
        """Make an op on ``eager`` inside build an error (``why``) rather than a constant of
        its value at trace time: a tensor whose value changes between calls that the graph
        cannot read as state."""
        self._unliftable[id(eager)] = why
        self._keepalive.append(eager)

    def lift(self, t):
        if t._lazy is not None:
            return t
        lazy = self.state_tensors.get(id(t))
        if lazy is not None:
            return lazy
        if t.is_global:
            return self._lift_global(t)
        return self._constant(t)

    def _lift_global(self, t):
        """A global tensor computed inside build() (a global parameter's ``.grad``, a lazy
        value made global) is its lazy piece, its whole value in the one process
        (``graph_piece``); an eager one captured from outside is refused, as it was never
        an input or the state of a module."""
        piece = graph_piece(t, self.ir.name)
        if piece._lazy is None and id(piece) not in self.state_tensors:
            raise GraphError(f"a global tensor (size {tuple(t.shape)}, sbp {t.sbp}) reached nn.Graph {self.ir.name}: "
                             "graphs take local tensors, and global ones only as inputs or as parameters and buffers "
                             "of their modules; pass it as an input of the graph, or x.to_local()")
        return self.lift(piece)

    def _constant(self, t):
        shared = t._aliases.keys() if t._aliases is not None else ()  # detach() of it shares its value
        why = next((self._unliftable[i] for i in (id(t), *shared) if i in self._unliftable), None)
        if why is not None:
            raise GraphError(f"nn.Graph {self.ir.name} cannot read a tensor of size {tuple(t.shape)} inside build(): "
                             f"{why}")
        name = f"_const_{len(self.constants)}"
        self.constants[name] = t.numpy()
        value = self.ir.add_value(Value(name, tuple(t.shape), t.dtype.name))
        self.ir.state[name] = value
        self.ir.state_kinds[name] = "constant"
        leaf = t.requires_grad and t.is_leaf  # as eagerly, backward() gives it a gradient
        lazy = self._lazy(value, requires_grad=leaf)
        if leaf:
            self._leaves.append((name, t, lazy))
        self.state_tensors[id(t)] = lazy
        self._keepalive.append(t)
        return lazy

    # -- recording --------------------------------------------------------------------------

    def record(self, prim, inputs, attrs, grad_enabled: bool) -> tuple[tuple, tuple]:
        """Add a node for ``prim``; returns the lifted inputs and the lazy outputs."""
        lazies = tuple(self.lift(t) for t in inputs)
        try:
            metas = infer_meta(prim, [t.meta for t in lazies], attrs)
        except FlowserveError as exc:
            exc.failed_node = Node(prim.name, [t._lazy.name for t in lazies], [], dict(attrs),
                                   self.scope[-1] if self.scope else "", user_location(self.stack_depth))
            exc.failed_ir = self.ir
            raise
        outs = []
        for meta in metas:
            outs.append(self.ir.add_value(Value(self.fresh_name(prim.name), tuple(meta.shape), meta.dtype.name)))
        node = Node(prim.name, [t._lazy.name for t in lazies], [v.name for v in outs],
                    dict(attrs), self.scope[-1] if self.scope else "", user_location(self.stack_depth),
                    batch_positions(attrs))
        self.ir.nodes.append(node)
        if grad_enabled:
            self.forward_values.update(node.outputs)
        if self.on_op is not None:
            self.on_op(node)
        return lazies, tuple(self._lazy(v) for v in outs)

    def assign(self, target, new) -> None:
        """In-place update inside build: ``target`` (state or lazy) now holds ``new``."""
        lazy = target if target._lazy is not None else self.state_tensors.get(id(target))
        if lazy is None:
            raise GraphError(
                "an in-place update inside nn.Graph.build changed a tensor that is not graph state "
                f"(size={tuple(target.shape)}); register it as a parameter or buffer of a module")
        if any(lazy._lazy is v for v in self.ir.inputs):
            warnings.warn(
                f"an in-place update inside nn.Graph.build changed the graph's input {lazy._lazy.name!r} "
                f"({user_location()}): the graph computes with the new value, but the caller's tensor keeps "
                "its old one (eager mode would change it too); write it out of place (x = x + 1)",
                UserWarning, stacklevel=2)
        new = self.lift(new)
        if tuple(new.shape) != tuple(lazy.shape) or new.dtype is not lazy.dtype:

            new = ops_functional.cast(ops_functional.expand(new, lazy.shape), lazy.dtype)
        lazy._lazy = new._lazy
        if new.requires_grad:
            lazy._requires_grad, lazy._node, lazy._out_index = True, new._node, new._out_index

    def state_updates(self) -> dict:
        """State name -> value name, for state whose value changed during the trace."""
        out = {}
        for name, eager in self.state_eager.items():
            current = self.state_tensors[id(eager)]._lazy.name
            if current != name:
                out[name] = current
        return out

    # -- modules ------------------------------------------------------------------------------

    def call_module(self, module, args, kwargs):
        name = self.module_names.get(id(module))
        if name is None:
            if self._unregistered_depth == 0 and self.on_unregistered_module is not None:
                self.on_unregistered_module(module)
            self._unregistered_depth += 1
            try:
                return module.forward(*args, **kwargs)
            finally:
                self._unregistered_depth -= 1
        self.scope.append(name)
        try:
            if self.on_module_call is not None:
                self.on_module_call("enter", name, module, args)
            out = module.forward(*args, **kwargs)
            self.module_calls.append((name, module, args, out))
            if self.on_module_call is not None:
                self.on_module_call("exit", name, module, out)
            return out
        finally:
            self.scope.pop()
