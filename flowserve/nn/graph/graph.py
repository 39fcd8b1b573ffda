"""``nn.Graph``: trace ``build()`` once, run it compiled (ONNX Runtime) from then on."""

from __future__ import annotations

import time
from collections import OrderedDict, defaultdict

from flowserve.errors import GraphError
from flowserve.nn.graph.config import GraphConfig
from flowserve.nn.graph.proxy import ProxyModule
from flowserve.nn.module import Module
from flowserve.ops import creation
from flowserve.tensor import Tensor
from flowserve.utils.tree import flatten, unflatten


class Graph:
    """Base class for running neural networks in static graph mode, as OneFlow's ``nn.Graph``.

    >>> import flowserve as flow
    >>> model = flow.nn.Linear(4, 3)
    >>> class GraphMyLinear(flow.nn.Graph):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.model = model
    ...     def build(self, x):
    ...         return self.model(x)
    >>> GraphMyLinear()(flow.randn(1, 4)).shape
    flowserve.Size([1, 3])
    """

    _child_init_cnt: dict = defaultdict(int)

    def __init__(self):
        cls = type(self)
        object.__setattr__(self, "_name", f"{cls.__name__}_{Graph._child_init_cnt[cls.__name__]}")
        Graph._child_init_cnt[cls.__name__] += 1
        object.__setattr__(self, "config", GraphConfig())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_optimizers", [])
        object.__setattr__(self, "_compiled", {})
        object.__setattr__(self, "_last", None)
        object.__setattr__(self, "_debug_level", -1)
        object.__setattr__(self, "_train_step", creation.zeros((), dtype="int64"))

    # -- attributes (OneFlow's rules) ------------------------------------------------------

    def __setattr__(self, name: str, value) -> None:
        from flowserve.optim.optimizer import Optimizer

        if isinstance(value, Module):
            self._add_module(name, value)
        elif isinstance(value, Optimizer):
            raise AttributeError(
                f"'{type(self).__name__}' nn.Graph is not allowed to set Optimizer attribute named "
                f"'{name}'. Please use add_optimizer(...) instead.")
        elif isinstance(value, Tensor):
            raise AttributeError(
                f"'{type(self).__name__}' nn.Graph is not allowed to set Tensor attribute named "
                f"'{name}'. Please use nn.Module to hold the tensor, then add the nn.Module to nn.Graph.")
        else:
            object.__setattr__(self, name, value)

    def _add_module(self, name: str, module: Module) -> None:
        if "_name" not in self.__dict__:
            raise AttributeError(
                "Base class nn.Graph has not been initialized, please call super().__init__() in "
                "subclass of nn.Graph before assigning any attribute.")
        if "." in name:
            raise KeyError(f'module name can\'t contain ".", got: {name}')
        if name == "":
            raise KeyError('module name can\'t be empty string ""')
        if name in self.__dict__ and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        self._modules[name] = ProxyModule(module, name)

    def __getattr__(self, name: str):
        modules = self.__dict__.get("_modules")
        if modules is not None and name in modules:
            return modules[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def _original_modules(self) -> "OrderedDict[str, Module]":
        return OrderedDict((k, p.to(Module)) for k, p in self._modules.items())

    def _module_names(self) -> dict:
        names = {}
        for attr, module in self._original_modules().items():
            for sub, m in module.named_modules(prefix=attr):
                names.setdefault(id(m), sub)
        return names

    # -- public API --------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def training(self) -> bool:
        return bool(self._optimizers)

    def build(self, *args, **kwargs):
        raise GraphError(f"nn.Graph subclass {type(self).__name__} must define build()")

    def add_optimizer(self, optim, *, lr_sch=None) -> None:
        if lr_sch is not None and getattr(lr_sch, "optimizer", None) is not optim:
            raise ValueError("lr_scheduler's optimizer must be the same optimizer in add_optimizer.")
        self._optimizers.append((optim, lr_sch))
        self.config.training = True

    def debug(self, v_level: int = 0, *, ranks=None, max_py_stack_depth: int = 2) -> None:
        object.__setattr__(self, "_debug_level", int(v_level))

    def __call__(self, *args, **kwargs):
        args = tuple(_as_tensor_arg(a) for a in args)
        leaves, spec = flatten((args, kwargs))
        key = (repr(spec), tuple((tuple(t.shape), t.dtype.name) for t in leaves))
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = self._compile(args, kwargs)
            self._compiled[key] = compiled
        object.__setattr__(self, "_last", compiled)
        outputs = compiled.run(leaves)
        if self.training:
            for _, sched in self._optimizers:
                if sched is not None:
                    sched.step()
        return unflatten(compiled.traced.out_spec, outputs)

    def _compile(self, args, kwargs):
        from flowserve.nn.graph.compiled import CompiledGraph
        from flowserve.nn.graph.trace import trace_build

        start = time.perf_counter()
        self._log(0, "start building graph.")
        traced = trace_build(self, args, kwargs)
        self._log(0, f"end building graph ({time.perf_counter() - start:.3f}s).")
        self._log(0, "start compiling plan and init graph runtime.")
        compiled = CompiledGraph(traced, self.training, self.config.options)
        self._log(0, f"end compiling plan and init graph runtime ({time.perf_counter() - start:.3f}s).")
        return compiled

    def _on_build_start(self, tracer) -> None:
        pass

    def _log(self, level: int, message: str) -> None:
        if self._debug_level >= level:
            print(f"(GRAPH:{self.name}:{type(self).__name__}) {message}")

    @property
    def is_compiled(self) -> bool:
        return self._last is not None

    def __repr__(self) -> str:
        from flowserve.nn.graph.printing import graph_repr

        return graph_repr(self)


def _as_tensor_arg(a):
    import numpy as np

    return creation.from_numpy(a) if isinstance(a, np.ndarray) else a
