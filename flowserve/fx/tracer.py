"""``flow.fx``'s symbolic tracer: ``Proxy`` values, the ``Tracer`` that records a module's
``forward`` as a ``Graph``, and ``symbolic_trace`` (see ``flowserve.fx``)."""

from __future__ import annotations

import inspect
import operator
import types

import flowserve
from flowserve import api as _api
from flowserve.fx.graph import (
    _INFIX,
    _UNARY,
    Graph,
    GraphModule,
    Node,
    TraceError,
    _namespaces,
)
from flowserve.nn.module import Module
from flowserve.nn.modules.container import ModuleDict, ModuleList, Sequential
from flowserve.tensor import Tensor

def wrap(fn_or_name):
    """Mark a function (or a module-level function's name) as an FX leaf; returns it unchanged."""
    if not (callable(fn_or_name) or isinstance(fn_or_name, str)):
        raise TypeError(f"fx.wrap expected a function or a function's name, got {type(fn_or_name).__name__}")
    return fn_or_name



class Proxy:
    """A traced value: operations on it add nodes to the tracer's graph."""

    def __init__(self, node: Node, tracer: "Tracer"):
        self.node, self.tracer = node, tracer

    def __getattr__(self, name: str) -> "Attribute":
        if name.startswith("__"):
            raise AttributeError(name)
        return Attribute(self, name)

    def __call__(self, *args, **kwargs):
        return self.tracer.create_proxy("call_method", "__call__", (self,) + args, kwargs)

    def __getitem__(self, index):
        return self.tracer.create_proxy("call_function", operator.getitem, (self, index), {})

    def __bool__(self):
        raise TraceError(f"symbolically traced value {self.node.name} cannot be used in control flow "
                         "(if/while/and/or): the trace sees no values")

    def __iter__(self):
        raise TraceError(f"symbolically traced value {self.node.name} cannot be iterated or unpacked: "
                         "index it (x[0]) or pass the count explicitly")

    def __len__(self):
        raise TraceError(f"len() of symbolically traced value {self.node.name}: use x.shape[0] or x.size(0)")

    def __repr__(self) -> str:
        return f"Proxy({self.node.name})"


class Attribute(Proxy):
    """``proxy.name``: a method call when called, else a ``getattr`` node (made when used)."""

    def __init__(self, root: Proxy, name: str):
        self.root, self.attr, self.tracer, self._node = root, name, root.tracer, None

    @property
    def node(self) -> Node:
        if self._node is None:
            self._node = self.tracer.create_proxy("call_function", getattr, (self.root, self.attr), {}).node
        return self._node

    def __call__(self, *args, **kwargs):
        return self.tracer.create_proxy("call_method", self.attr, (self.root,) + args, kwargs)


def _operator_method(op, reflected: bool = False):
    def method(self, *other):
        args = (other[0], self) if reflected else (self, *other)
        return self.tracer.create_proxy("call_function", op, args, {})

    return method


for _op in list(_INFIX) + list(_UNARY):
    _name = _op.__name__.rstrip("_")
    setattr(Proxy, f"__{_name}__", _operator_method(_op))
    if _op in _INFIX and _name not in ("lt", "le", "gt", "ge", "eq", "ne"):
        setattr(Proxy, f"__r{_name}__", _operator_method(_op, reflected=True))
Proxy.__hash__ = object.__hash__  # __eq__ records a node; proxies stay usable as dict keys


class Tracer:
    """Records ``root.forward`` as a ``Graph``: built-in ``flowserve.nn`` modules (not the
    containers) are leaves, recorded as ``call_module``; every other module is traced through."""

    def __init__(self):
        self.graph = Graph()
        self.root: Module | None = None
        self._module_names: dict = {}
        self._state_names: dict = {}

    def is_leaf_module(self, module: Module, qualified_name: str) -> bool:
        return (type(module).__module__.startswith("flowserve.nn.")
                and not isinstance(module, (Sequential, ModuleList, ModuleDict)))

    def trace(self, root, concrete_args: dict | None = None) -> Graph:
        """The graph of ``root.forward`` (``root`` a module) or of ``root`` (a function); the
        arguments named in ``concrete_args`` take those values instead of becoming inputs."""
        forward = root.forward if isinstance(root, Module) else root
        self.root, self.graph = (root if isinstance(root, Module) else Module()), Graph()
        self._module_names = {id(m): name for name, m in self.root.named_modules()}
        self._state_names = {id(t): n for n, t in [*self.root.named_parameters(), *self.root.named_buffers()]}
        args, kwargs = self._placeholders(forward, dict(concrete_args or {}))
        with _Patched(self):
            result = forward(*args, **kwargs)
        self.graph.output(self._as_arg(result))
        return self.graph

    def _placeholders(self, forward, concrete: dict) -> tuple[list, dict]:
        """``forward``'s arguments for the trace: a proxy of a new placeholder for each, or its
        ``concrete`` value; keyword-only ones as keywords."""
        args, kwargs, names = [], {}, inspect.signature(forward).parameters
        unknown = set(concrete) - set(names)
        if unknown:
            raise TraceError(f"symbolic_trace: concrete_args names {sorted(unknown)}, which forward does not take")
        for p in names.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise TraceError(f"symbolic_trace: forward's *{p.name} has no fixed inputs to trace")
            keyword_only = p.kind == p.KEYWORD_ONLY
            value = concrete[p.name] if p.name in concrete else Proxy(
                self.graph.placeholder(p.name, p.default, keyword_only), self)
            if keyword_only:
                kwargs[p.name] = value
            else:
                args.append(value)
        return args, kwargs

    def create_proxy(self, op: str, target, args: tuple, kwargs: dict) -> Proxy:
        return Proxy(self.graph.create_node(op, target, self._as_arg(args), self._as_arg(kwargs)), self)

    def _as_arg(self, a):
        if isinstance(a, Proxy):
            return a.node
        if isinstance(a, Tensor) and id(a) in self._state_names:
            return self.graph.create_node("get_attr", self._state_names[id(a)])
        if isinstance(a, (tuple, list)):
            return type(a)(self._as_arg(x) for x in a)
        if isinstance(a, dict):
            return {k: self._as_arg(v) for k, v in a.items()}
        return a

    def call_module(self, module: Module, forward, args, kwargs):
        name = self._module_names.get(id(module))
        if name is not None and self.is_leaf_module(module, name):
            return self.create_proxy("call_module", name, args, kwargs)
        if name is None and _has_proxy((args, kwargs)):
            raise TraceError(f"symbolic_trace: {type(module).__name__} is called but is not a submodule of the "
                             "traced module; assign it as an attribute in __init__")
        return forward(*args, **kwargs)


class _Patched:
    """While tracing: module calls, ``flowserve.<fn>`` and ``F.<fn>`` go through the tracer,
    and tensor operators give way to a proxy operand (Python then asks the proxy)."""

    def __init__(self, tracer: Tracer):
        self.tracer, self.saved = tracer, []

    def __enter__(self):
        tracer = self.tracer
        original_call = Module.__call__

        def call(module, *args, **kwargs):
            return tracer.call_module(module, lambda *a, **k: original_call(module, *a, **k), args, kwargs)

        self._set(Module, "__call__", call)
        self._set(Module, "__getattr__", _state_proxies(Module.__getattr__, tracer))
        for prefix, namespace, names in _namespaces():
            for name in list(names):
                fn = getattr(namespace, name, None)
                if isinstance(fn, types.FunctionType) and not name.startswith("_"):
                    self._set(flowserve if namespace is _api else namespace, name, _recording(fn, tracer))
        for op in _INFIX:
            for dunder in (f"__{op.__name__.rstrip('_')}__", f"__r{op.__name__.rstrip('_')}__"):
                if dunder in vars(Tensor) or hasattr(Tensor, dunder):
                    self._set(Tensor, dunder, _yielding(getattr(Tensor, dunder)))
        return self

    def _set(self, owner, name: str, value) -> None:
        self.saved.append((owner, name, owner.__dict__.get(name, _ABSENT)))
        setattr(owner, name, value)

    def __exit__(self, *exc):
        for owner, name, value in reversed(self.saved):
            if value is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, value)
        return False


_ABSENT = object()


def _recording(fn, tracer: Tracer):
    def record(*args, **kwargs):
        if _has_proxy((args, kwargs)):
            return tracer.create_proxy("call_function", fn, args, kwargs)
        return fn(*args, **kwargs)

    record.__wrapped__ = fn
    return record


def _state_proxies(getattr_, tracer: Tracer):
    """``module.weight`` of a traced-through module: a ``get_attr`` node, so the generated code
    reads the parameter when it runs (not its value at trace time)."""

    def module_getattr(module, name: str):
        value = getattr_(module, name)
        if isinstance(value, Tensor) and id(value) in tracer._state_names:
            return Proxy(tracer.graph.create_node("get_attr", tracer._state_names[id(value)]), tracer)
        return value

    return module_getattr


def _yielding(method):
    def operator_method(self, other):
        return NotImplemented if isinstance(other, Proxy) else method(self, other)

    return operator_method


def symbolic_trace(root, concrete_args: dict | None = None) -> GraphModule:
    """Trace ``root`` (a module, or a function of tensors) symbolically into a ``GraphModule``
    (see the module's docstring); ``concrete_args`` maps argument names to the values the
    trace specializes on (``{"training": False}``), which the ``GraphModule`` then does not take."""
    if not (isinstance(root, Module) or callable(root)):
        raise TypeError(f"symbolic_trace expects an nn.Module or a function, got {type(root).__name__}")
    tracer = Tracer()
    graph = tracer.trace(root, concrete_args)
    name = type(root).__name__ if isinstance(root, Module) else getattr(root, "__name__", "GraphModule")
    return GraphModule(tracer.root, graph, name)


def _has_proxy(tree) -> bool:
    if isinstance(tree, Proxy):
        return True
    if isinstance(tree, (tuple, list)):
        return any(_has_proxy(x) for x in tree)
    if isinstance(tree, dict):
        return any(_has_proxy(v) for v in tree.values())
    return False


