"""Module proxies: what ``graph.model`` is once a module is added to an ``nn.Graph``.

``graph.model`` is a ``ProxyModule``: calls, attributes and indexing reach the module,
submodules come back as proxies (``graph.model.features``), and ``.to(GraphModule)``
gives the graph options of that module, ``.to(nn.Module)`` the module itself. A parameter or
buffer read from a proxy (``graph.model.weight``) is a ``ProxyTensor``: ``.to(GraphTensor)``
gives its graph representation (name and type), ``.to(flow.Tensor)`` the tensor, and its
other attributes are the tensor's. Inside ``build()`` (while the graph traces) ``graph.model.weight``
is the tensor itself, so build code reads the parameter the graph trains.

>>> import flowserve as flow
>>> from flowserve.nn.graph import GraphModule, GraphTensor
>>> class G(flow.nn.Graph):
...     def __init__(self):
...         super().__init__()
...         self.m = flow.nn.Sequential(flow.nn.Linear(2, 2))
>>> g = G()
>>> g.m[0].to(GraphModule).name_prefix, g.m[0].to(GraphModule).name, g.m[0].weight.to(GraphTensor).type
('m.', '0', 'PARAMETER')
"""

from __future__ import annotations

from flowserve.device import as_device
from flowserve.dispatch import current_trace
from flowserve.nn.module import Module
from flowserve.tensor import Tensor


class Proxy:
    """What ``nn.Graph`` gives for a module or tensor it holds (``flow.nn.graph.Proxy``)."""

    __slots__ = ()


def _split_name(full_name: str) -> tuple:
    """``"m.layer.conv1"`` -> (``"m.layer."``, ``"conv1"``): OneFlow's name prefix and name."""
    prefix, _, name = full_name.rpartition(".")
    return (prefix + "." if prefix else ""), name


class GraphTensor:
    """The graph representation of a parameter or buffer of a module in an ``nn.Graph``:
    ``graph.model.weight.to(GraphTensor)``; ``type`` is ``"PARAMETER"`` or ``"BUFFER"``."""

    def __init__(self, full_name: str, kind: str):
        self.name_prefix, self.name = _split_name(full_name)
        self.type = kind

    def __repr__(self) -> str:
        return f"({self.type}:{self.name_prefix}{self.name})"


class ProxyTensor(Proxy):
    """A parameter or buffer read from a ``ProxyModule`` outside ``build()``."""

    __slots__ = ("_oneflow_internal_origin", "_graph_tensor")

    def __init__(self, tensor: Tensor, full_name: str, kind: str):
        object.__setattr__(self, "_oneflow_internal_origin", tensor)
        object.__setattr__(self, "_graph_tensor", GraphTensor(full_name, kind))

    def to(self, *args, **kwargs):
        """``to(GraphTensor)``: the graph representation; ``to(flow.Tensor)``: the tensor; any
        other arguments: ``Tensor.to`` of the tensor."""
        if len(args) == 1 and not kwargs and args[0] is GraphTensor:
            return self._graph_tensor
        if len(args) == 1 and not kwargs and isinstance(args[0], type) and issubclass(Tensor, args[0]):
            return self._oneflow_internal_origin
        return self._oneflow_internal_origin.to(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._oneflow_internal_origin, name)

    def __setattr__(self, name: str, value) -> None:
        setattr(self._oneflow_internal_origin, name, value)

    def __repr__(self) -> str:
        g = self._graph_tensor
        return f"({g.type}:{g.name_prefix}{g.name}:{self._oneflow_internal_origin!r})"


class GraphModule:
    """The graph options of one module: ``graph.model.to(GraphModule).set_stage(0)``,
    ``graph.model.layer1.to(GraphModule).activation_checkpointing = True``. ``name`` and
    ``name_prefix`` are OneFlow's (``"conv1"`` and ``"m.layer."``), ``full_name`` both."""

    type = "MODULE"

    def __init__(self, full_name: str, module):
        self.full_name = full_name
        self.name_prefix, self.name = _split_name(full_name)
        self.module = module
        self.stage_id = None
        self.placement = None
        self._activation_checkpointing = False

    def set_stage(self, stage_id: int, placement=None) -> None:
        """Set the pipeline stage id (and placement: ``[rank]``) of this module. In a launched
        run each stage runs on its rank; in one process stages change no result. They are
        validated, recorded in the IR and shown by ``repr``."""
        if isinstance(stage_id, bool) or not isinstance(stage_id, int) or stage_id < 0:
            raise ValueError(f"set_stage of module {self.full_name!r} expects a non-negative int stage_id, "
                             f"got {stage_id!r}")
        self.stage_id, self.placement = stage_id, _placement_name(placement, self.full_name)

    @property
    def activation_checkpointing(self) -> bool:
        """Whether the module's forward is recomputed in backward instead of keeping its
        activations (lower peak memory, same results)."""
        return self._activation_checkpointing

    @activation_checkpointing.setter
    def activation_checkpointing(self, mode: bool) -> None:
        if not isinstance(mode, bool):
            raise TypeError(f"activation_checkpointing of module {self.full_name!r} must be a bool, got {mode!r}")
        self._activation_checkpointing = mode

    def options(self) -> dict:
        """The non-default options (what the IR records and repr shows)."""
        out = {}
        if self.stage_id is not None:
            out["stage_id"] = self.stage_id
            out["placement"] = self.placement
        if self._activation_checkpointing:
            out["activation_checkpointing"] = True
        return out

    def __repr__(self) -> str:
        return f"(GraphModule:{self.full_name}:{', '.join(f'{k}={v}' for k, v in self.options().items())})"


def _placement_name(placement, module: str):
    if placement is None:
        return None
    if isinstance(placement, (list, tuple)) and all(isinstance(r, int) and r >= 0 for r in placement):
        return list(placement)
    try:
        return str(as_device(placement))
    except Exception:
        raise ValueError(f"set_stage of module {module!r} expects a placement that is a device "
                         f"('cpu', 'cuda:0') or a list of ranks, got {placement!r}") from None


class ProxyModule(Proxy):
    """Wraps a module registered on a graph; knows its full name; calls go to the module."""

    __slots__ = ("_oneflow_internal_origin", "_name", "_options")

    def __init__(self, module, name: str, options: dict | None = None):
        object.__setattr__(self, "_oneflow_internal_origin", module)
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_options", {} if options is None else options)  # shared by the tree

    def _graph_module_of(self, name: str, module) -> GraphModule:
        options = self._options
        if name not in options:
            options[name] = GraphModule(name, module)
        return options[name]

    def to(self, kind):
        if kind is GraphModule:
            return self._graph_module_of(self._name, self._oneflow_internal_origin)
        if isinstance(kind, type) and issubclass(kind, Module):
            return self._oneflow_internal_origin
        raise TypeError(f"ProxyModule.to expects nn.Module or nn.graph.GraphModule, got {kind!r}")

    def __call__(self, *args, **kwargs):
        return self._oneflow_internal_origin(*args, **kwargs)

    def _wrap(self, value, name: str):
        if isinstance(value, Module):
            return ProxyModule(value, f"{self._name}.{name}", self._options)
        if not isinstance(value, Tensor) or current_trace() is not None:
            return value  # inside build() a module's tensor is the tensor itself, as in OneFlow
        module = self._oneflow_internal_origin
        for kind, states in (("PARAMETER", module._parameters), ("BUFFER", module._buffers)):
            if states.get(name) is value:
                return ProxyTensor(value, f"{self._name}.{name}", kind)
        return value

    def __getattr__(self, name: str):
        return self._wrap(getattr(self._oneflow_internal_origin, name), name)

    def __setattr__(self, name: str, value) -> None:
        setattr(self._oneflow_internal_origin, name, value)

    def __getitem__(self, index):
        module = self._oneflow_internal_origin
        value = module[index]
        if isinstance(index, int):
            key = list(module._modules)[index]
            return self._wrap(value, key)
        return value

    def __len__(self) -> int:
        return len(self._oneflow_internal_origin)

    def __iter__(self):
        return iter(self._oneflow_internal_origin)

    def state_dict(self, *args, **kwargs):
        raise TypeError(
            f"graph.{self._name} is a proxy of the module inside nn.Graph, not an nn.Module: save the "
            f"graph's state with graph.state_dict(), or the module's with graph.{self._name}"
            ".to(nn.Module).state_dict()")

    def __repr__(self) -> str:
        return repr(self._oneflow_internal_origin)
