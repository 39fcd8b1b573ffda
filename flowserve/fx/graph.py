"""``flow.fx``'s graph: ``Node``, ``Graph`` (and the Python code generated from it), and
``GraphModule``, the module that runs a graph (see ``flowserve.fx``)."""

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
from flowserve.errors import FlowserveError
from flowserve.nn import functional as _functional
from flowserve.nn.module import Module

_INFIX = types.MappingProxyType({operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/", operator.floordiv: "//",
          operator.mod: "%", operator.pow: "**", operator.matmul: "@", operator.lt: "<", operator.le: "<=",
          operator.gt: ">", operator.ge: ">=", operator.eq: "==", operator.ne: "!=", operator.and_: "&",
          operator.or_: "|", operator.xor: "^"})
_UNARY = types.MappingProxyType({operator.neg: "-", operator.pos: "+", operator.invert: "~"})
_LITERALS = (int, float, bool, str, type(None), type(Ellipsis), slice)
_RESERVED = frozenset({"self", "flowserve", "operator", "getattr", *dir(builtins)})



class TraceError(FlowserveError):
    """What symbolic tracing cannot record (control flow on a traced value, ...)."""



class Node:
    """One operation of a ``Graph``: ``op`` (``placeholder``, ``get_attr``, ``call_function``,
    ``call_method``, ``call_module``, ``output``), ``target`` (the function, the method's or
    attribute's name, the module's qualified name), ``args`` and ``kwargs`` (other nodes in
    place of traced values), and ``users``, the nodes that read it."""

    def __init__(self, graph: "Graph", name: str, op: str, target, args: tuple, kwargs: dict):
        self.graph, self.name, self.op, self.target = graph, name, op, target
        self.args, self.kwargs = tuple(args), dict(kwargs)
        self.users: dict = {}
        self.meta: dict = {}  # facts a pass or the code generator reads ("keyword_only" placeholders)
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

    def create_node(self, op: str, target, args=(), kwargs=None, name: str | None = None,
                    index: int | None = None) -> Node:
        """A new node, appended (or inserted at position ``index``)."""
        node = Node(self, self._unique(name or _base_name(op, target)), op, target, args, kwargs or {})
        self.nodes.insert(len(self.nodes) if index is None else index, node)
        return node

    def placeholder(self, name: str, default=inspect.Parameter.empty, keyword_only: bool = False) -> Node:
        node = self.create_node("placeholder", name, () if default is inspect.Parameter.empty else (default,),
                                name=name)
        node.meta["keyword_only"] = keyword_only
        return node

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
        params, keyword_only, body = ["self"], [], []
        for node in self.nodes:
            if node.op == "placeholder":
                spelled = node.name if not node.args else f"{node.name}={namespace.value(node.args[0])}"
                (keyword_only if node.meta.get("keyword_only") else params).append(spelled)
            elif node.op == "output":
                body.append(f"return {namespace.value(node.args[0])}")
            else:
                body.append(f"{node.name} = {namespace.expression(node)}")
        params += ["*", *keyword_only] if keyword_only else []
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


def _namespaces() -> tuple:
    """(code prefix, module holding the functions, their names) of what tracing records."""
    return (("flowserve", _api, _api.__all__), ("flowserve.nn.functional", _functional, vars(_functional)),
            ("flowserve._C", _oneflow_functional, vars(_oneflow_functional)))


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


