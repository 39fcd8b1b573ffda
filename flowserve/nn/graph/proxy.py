"""Module proxies: what ``graph.model`` is once a module is added to an ``nn.Graph``."""

from __future__ import annotations


class GraphModule:
    """The graph options of one module: ``graph.model.to(GraphModule).set_stage(0)``."""

    def __init__(self, name: str, module):
        self.name = name
        self.module = module
        self.stage_id = None
        self.placement = None
        self.activation_checkpointing = False

    def set_stage(self, stage_id: int, placement=None) -> None:
        if not isinstance(stage_id, int) or stage_id < 0:
            raise ValueError(f"stage_id must be a non-negative int, got {stage_id!r}")
        self.stage_id, self.placement = stage_id, placement

    def __repr__(self) -> str:
        return f"GraphModule(name={self.name!r}, stage_id={self.stage_id}, " \
               f"activation_checkpointing={self.activation_checkpointing})"


class ProxyModule:
    """Wraps a module registered on a graph; knows its full name; calls go to the module."""

    def __init__(self, module, name: str):
        object.__setattr__(self, "_oneflow_internal_origin", module)
        object.__setattr__(self, "_graph_module", GraphModule(name, module))
        object.__setattr__(self, "_name", name)

    def to(self, kind):
        from flowserve.nn.module import Module

        if kind is GraphModule:
            return self._graph_module
        if isinstance(kind, type) and issubclass(kind, Module):
            return self._oneflow_internal_origin
        raise TypeError(f"ProxyModule.to expects nn.Module or nn.graph.GraphModule, got {kind!r}")

    def __call__(self, *args, **kwargs):
        return self._oneflow_internal_origin(*args, **kwargs)

    def __getattr__(self, name: str):
        value = getattr(self._oneflow_internal_origin, name)
        from flowserve.nn.module import Module

        if isinstance(value, Module):
            return ProxyModule(value, f"{self._name}.{name}")
        return value

    def __setattr__(self, name: str, value) -> None:
        setattr(self._oneflow_internal_origin, name, value)

    def __getitem__(self, index):
        return self._oneflow_internal_origin[index]

    def __repr__(self) -> str:
        return repr(self._oneflow_internal_origin)
