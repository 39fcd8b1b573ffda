"""``flow.fx``: OneFlow's ``torch.fx``-style symbolic tracing of a module into a ``Graph`` of
``Node`` s, a ``GraphModule`` that runs it, and the ``wrap`` hook that model files call at import.

``symbolic_trace(module)`` runs ``module.forward`` on ``Proxy`` objects instead of tensors
(no example input is needed) and records what it does: each input is a ``placeholder`` node,
each call of a built-in ``flowserve.nn`` module a ``call_module`` node, each ``flowserve``,
``flowserve.nn.functional`` or ``flowserve._C`` function a ``call_function`` node, each tensor method a
``call_method`` node, each parameter or buffer read a ``get_attr`` node, the result the
``output`` node. The ``GraphModule`` it returns holds the traced module's submodules,
parameters and buffers (the same objects), shows the Python code generated from the graph
as ``.code``, and computes what the module computes, eagerly or inside an ``nn.Graph``.

As in ``torch.fx``, tracing cannot see values: Python control flow on a traced value (``if
x.sum() > 0``) raises ``TraceError``, and a function reached by another name than
``flow.<name>``, ``F.<name>`` or ``flow._C.<name>`` (``from flowserve import cat``) is not
recorded.

>>> import flowserve as flow
>>> class M(flow.nn.Module):
...     def __init__(self):
...         super().__init__()
...         self.linear = flow.nn.Linear(4, 3)
...     def forward(self, x):
...         return flow.relu(self.linear(x)) + 1
>>> gm = flow.fx.symbolic_trace(M())
>>> [n.op for n in gm.graph.nodes]
['placeholder', 'call_module', 'call_function', 'call_function', 'output']
>>> print(gm.code.strip())
def forward(self, x):
    linear = self.linear(x)
    relu = flowserve.relu(linear)
    add = relu + 1
    return add

``wrap`` (``torch.fx.wrap("stochastic_depth")`` in torchvision) marks a function as a leaf:
flowserve's ``nn.Graph`` traces every function through, so it returns its argument unchanged.
"""

from __future__ import annotations

import builtins
import inspect
import keyword
import operator
import re
import types

import flowserve
from flowserve import _C as _oneflow_functional
from flowserve import api as _api
from flowserve._missing import module_getattr as _module_getattr
from flowserve.errors import FlowserveError
from flowserve.nn import functional as _functional
from flowserve.nn.module import Module
from flowserve.nn.modules.container import ModuleDict, ModuleList, Sequential
from flowserve.tensor import Tensor

__all__ = ["Graph", "GraphModule", "Node", "Proxy", "TraceError", "Tracer", "symbolic_trace", "wrap"]

_INFIX = {operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/", operator.floordiv: "//",
          operator.mod: "%", operator.pow: "**", operator.matmul: "@", operator.lt: "<", operator.le: "<=",
          operator.gt: ">", operator.ge: ">=", operator.eq: "==", operator.ne: "!=", operator.and_: "&",
          operator.or_: "|", operator.xor: "^"}
_UNARY = {operator.neg: "-", operator.pos: "+", operator.invert: "~"}
_LITERALS = (int, float, bool, str, type(None), type(Ellipsis), slice)
_RESERVED = {"self", "flowserve", "operator", "getattr"} | set(dir(builtins))


class TraceError(FlowserveError):
    """What symbolic tracing cannot record (control flow on a traced value, ...)."""


def wrap(fn_or_name):
    """Mark a function (or a module-level function's name) as an FX leaf; returns it unchanged."""
    if not (callable(fn_or_name) or isinstance(fn_or_name, str)):
        raise TypeError(f"fx.wrap expected a function or a function's name, got {type(fn_or_name).__name__}")
    return fn_or_name


class Node:
    """One operation of a ``Graph``: ``op`` (``placeholder``, ``get_attr``, ``call_function``,
    ``call_method``, ``call_module``, ``output``), ``target`` (the function, the method's or
    attribute's name, the module's qualified name), ``args`` and ``kwargs`` (other nodes in
    place of traced values), and ``users``, the nodes that read it."""

    def __init__(self, graph: "Graph", name: str, op: str, target, args: tuple, kwargs: dict):
        self.graph, self.name, self.op, self.target = graph, name, op, target
        self.args, self.kwargs = tuple(args), dict(kwargs)
        self.users: dict = {}
        for node in self.all_input_nodes:
            node.users[self] = None

    @property
    def all_input_nodes(self) -> list:
        found: list = []
        _map_nodes((self.args, self.kwargs), lambda n: found.append(n) if n not in found else None)
        return found

    def replace_all_uses_with(self, replacement: "Node") -> list:
        """Make every user of this node read ``replacement`` instead; returns those users."""
        users = list(self.users)
        for user in users:
            user.args, user.kwargs = _swap(user.args, self, replacement), _swap(user.kwargs, self, replacement)
            replacement.users[user] = None
        self.users.clear()
        return users

    def __repr__(self) -> str:
        return self.name


class Graph:
    """The nodes of a traced module, in execution order (``graph.nodes``)."""

    def __init__(self):
        self.nodes: list[Node] = []
        self._names: dict = {}

    def create_node(self, op: str, target, args=(), kwargs=None, name: str | None = None) -> Node:
        node = Node(self, self._unique(name or _base_name(op, target)), op, target, args, kwargs or {})
        self.nodes.append(node)
        return node

    def placeholder(self, name: str, default=inspect.Parameter.empty) -> Node:
        return self.create_node("placeholder", name, () if default is inspect.Parameter.empty else (default,),
                                name=name)

    def output(self, result) -> Node:
        return self.create_node("output", "output", (result,), name="output")

    def call_function(self, fn, args=(), kwargs=None) -> Node:
        return self.create_node("call_function", fn, args, kwargs)

    def erase_node(self, node: Node) -> None:
        if node.users:
            raise TraceError(f"erase_node: {node.name} still has users {list(node.users)}")
        for source in node.all_input_nodes:
            source.users.pop(node, None)
        self.nodes.remove(node)

    def lint(self) -> None:
        """Check that every node reads only nodes of this graph defined before it, and that
        the graph ends with its one ``output``."""
        seen: set = set()
        for node in self.nodes:
            missing = [n.name for n in node.all_input_nodes if n not in seen]
            if node.graph is not self or missing:
                raise TraceError(f"graph lint: node {node.name} reads {missing or 'nodes of another graph'} "
                                 "before they are defined in this graph")
            seen.add(node)
        if not self.nodes or self.nodes[-1].op != "output" or [n.op for n in self.nodes].count("output") != 1:
            raise TraceError("graph lint: a graph ends with exactly one output node")

    def _unique(self, base: str) -> str:
        base = re.sub(r"\W", "_", base).strip("_") or "node"
        base = base if base[0].isalpha() else f"_{base}"  # submodule "0" of a Sequential: node "_0"
        base = f"{base}_" if keyword.iskeyword(base) or base in _RESERVED else base
        count = self._names.get(base, 0)
        self._names[base] = count + 1
        return base if count == 0 else f"{base}_{count}"

    def python_code(self) -> tuple[str, dict]:
        """The source of ``forward`` and the globals it runs with."""
        namespace = _CodeNamespace()
        params, body = ["self"], []
        for node in self.nodes:
            if node.op == "placeholder":
                params.append(node.name if not node.args else f"{node.name}={namespace.value(node.args[0])}")
            elif node.op == "output":
                body.append(f"return {namespace.value(node.args[0])}")
            else:
                body.append(f"{node.name} = {namespace.expression(node)}")
        lines = [f"def forward({', '.join(params)}):"] + [f"    {line}" for line in body or ["pass"]]
        return "\n\n\n" + "\n".join(lines) + "\n", namespace.globals

    def __str__(self) -> str:
        lines = ["graph():"]
        for n in self.nodes:
            args = _CodeNamespace().arguments(_map_nodes(n.args, lambda m: _Named(f"%{m.name}")), {})
            lines.append(f"    %{n.name} : [num_users={len(n.users)}] = {n.op}[target={_target_repr(n.target)}]"
                         f"(args = ({args}), kwargs = {n.kwargs})")
        return "\n".join(lines)


class _Named(str):
    """A name printed as it is (``%x`` in ``str(graph)``)."""

    def __repr__(self) -> str:
        return str(self)


class _CodeNamespace:
    """Names the generated code uses for functions and for constants it cannot spell."""

    def __init__(self):
        self.globals = {"flowserve": flowserve, "operator": operator, "getattr": getattr}

    def expression(self, node: Node) -> str:
        args, kwargs = node.args, node.kwargs
        if node.op == "get_attr":
            return _attr_path("self", node.target)
        if node.op == "call_module":
            return f"{_attr_path('self', node.target)}({self.arguments(args, kwargs)})"
        if node.op == "call_method":
            return f"{self.value(args[0])}.{node.target}({self.arguments(args[1:], kwargs)})"
        if node.target in _INFIX and len(args) == 2 and not kwargs:
            return f"{self.value(args[0])} {_INFIX[node.target]} {self.value(args[1])}"
        if node.target in _UNARY and len(args) == 1:
            return f"{_UNARY[node.target]}{self.value(args[0])}"
        if node.target is operator.getitem and not kwargs:
            return f"{self.value(args[0])}[{self.value(args[1])}]"
        return f"{self.function(node.target)}({self.arguments(args, kwargs)})"

    def arguments(self, args, kwargs) -> str:
        return ", ".join([self.value(a) for a in args] + [f"{k}={self.value(v)}" for k, v in kwargs.items()])

    def function(self, fn) -> str:
        """``flowserve.<name>`` / ``flowserve.nn.functional.<name>`` where ``fn`` is one."""
        for prefix, namespace, names in _namespaces():
            name = getattr(fn, "__name__", None)
            if name is not None and getattr(namespace, name, None) is fn:
                return f"{prefix}.{name}"
            name = next((n for n in names if not n.startswith("_") and getattr(namespace, n, None) is fn), None)
            if name is not None:
                return f"{prefix}.{name}"
        return self.constant(fn, getattr(fn, "__name__", "fn"))

    def value(self, a) -> str:
        if isinstance(a, Node):
            return a.name
        if isinstance(a, (tuple, list)):
            inner = ", ".join(self.value(x) for x in a)
            return f"({inner},)" if isinstance(a, tuple) and len(a) == 1 else (f"({inner})" if isinstance(a, tuple)
                                                                             else f"[{inner}]")
        if isinstance(a, dict):
            return "{" + ", ".join(f"{self.value(k)}: {self.value(v)}" for k, v in a.items()) + "}"
        if isinstance(a, _LITERALS) and not (isinstance(a, float) and a != a):
            return repr(a)
        return self.constant(a, "_constant")

    def constant(self, value, base: str) -> str:
        name = "_" + re.sub(r"\W", "_", base).strip("_") + f"_{len(self.globals)}"
        self.globals[name] = value
        return name


class GraphModule(Module):
    """A module made from ``graph``: it holds the submodules, parameters and buffers of
    ``root`` that the graph reads (the same objects), and its ``forward`` is the code
    generated from the graph (``.code``; ``recompile()`` after editing ``.graph``)."""

    def __init__(self, root: Module, graph: Graph, class_name: str = "GraphModule"):
        super().__init__()
        object.__setattr__(self, "__class__", type(class_name, (GraphModule,), {}))
        for node in graph.nodes:
            if node.op in ("call_module", "get_attr"):
                first = node.target.split(".")[0]
                if first not in self._modules and first not in self._parameters and first not in self._buffers:
                    _copy_attr(root, self, first)
        object.__setattr__(self, "_fx_graph", graph)
        self.recompile()

    @property
    def graph(self) -> Graph:
        return self._fx_graph

    @property
    def code(self) -> str:
        return self._fx_code

    def recompile(self) -> str:
        code, namespace = self._fx_graph.python_code()
        exec(compile(code, f"<flowserve.fx GraphModule {type(self).__name__}>", "exec"), namespace)  # noqa: S102
        object.__setattr__(self, "_fx_code", code)
        object.__setattr__(self, "_fx_forward", namespace["forward"])
        return code

    def forward(self, *args, **kwargs):
        return self._fx_forward(self, *args, **kwargs)


def _copy_attr(root: Module, gm: Module, name: str) -> None:
    if name in root._modules:
        gm.add_module(name, root._modules[name])
    elif name in root._parameters:
        gm.register_parameter(name, root._parameters[name])
    elif name in root._buffers:
        gm.register_buffer(name, root._buffers[name])
    else:
        raise TraceError(f"GraphModule: the traced module has no submodule, parameter or buffer {name!r}")


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
        arguments = self._placeholders(forward, dict(concrete_args or {}))
        with _Patched(self):
            result = forward(*arguments)
        self.graph.output(self._as_arg(result))
        return self.graph

    def _placeholders(self, forward, concrete: dict) -> list:
        out, names = [], inspect.signature(forward).parameters
        unknown = set(concrete) - set(names)
        if unknown:
            raise TraceError(f"symbolic_trace: concrete_args names {sorted(unknown)}, which forward does not take")
        for p in names.values():
            if p.name in concrete:
                out.append(concrete[p.name])
            elif p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise TraceError(f"symbolic_trace: forward's *{p.name} has no fixed inputs to trace")
            else:
                out.append(Proxy(self.graph.placeholder(p.name, p.default), self))
        return out

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


def _namespaces() -> tuple:
    """(code prefix, module holding the functions, their names) of what tracing records."""
    return (("flowserve", _api, _api.__all__), ("flowserve.nn.functional", _functional, vars(_functional)),
            ("flowserve._C", _oneflow_functional, vars(_oneflow_functional)))


def _has_proxy(tree) -> bool:
    if isinstance(tree, Proxy):
        return True
    if isinstance(tree, (tuple, list)):
        return any(_has_proxy(x) for x in tree)
    if isinstance(tree, dict):
        return any(_has_proxy(v) for v in tree.values())
    return False


def _map_nodes(tree, fn):
    if isinstance(tree, Node):
        return fn(tree)
    if isinstance(tree, (tuple, list)):
        return type(tree)(_map_nodes(x, fn) for x in tree)
    if isinstance(tree, dict):
        return {k: _map_nodes(v, fn) for k, v in tree.items()}
    return tree


def _swap(tree, old: Node, new: Node):
    return _map_nodes(tree, lambda n: new if n is old else n)


def _base_name(op: str, target) -> str:
    if op in ("call_module", "get_attr"):
        return target.replace(".", "_")
    if op == "call_method":
        return target
    if target in _INFIX or target in _UNARY:
        return target.__name__.rstrip("_")
    return getattr(target, "__name__", "call")


def _target_repr(target) -> str:
    return target if isinstance(target, str) else getattr(target, "__name__", repr(target))


def _attr_path(base: str, qualified: str) -> str:
    for part in qualified.split("."):
        base = f"{base}.{part}" if part.isidentifier() and not keyword.iskeyword(part) else f"getattr({base}, {part!r})"
    return base


__getattr__ = _module_getattr("flowserve.fx")  # torch.jit.script and the rest: what to use instead
