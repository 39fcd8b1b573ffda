"""``nn.Module``: PyTorch's module API (parameters, buffers, submodules, state_dict, hooks)."""

from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Iterator

from flowserve import dtypes
from flowserve.autograd.grad_mode import no_grad
from flowserve.dispatch import current_trace
from flowserve.distributed import sbp as sbp_types
from flowserve.errors import DistributedError, FlowserveError
from flowserve.nn.parameter import Parameter
from flowserve.nn.state import load_module_state
from flowserve.tensor import Tensor


class Module:
    """Base class of all neural-network modules, as ``torch.nn.Module``.

    >>> import flowserve as flow
    >>> class Net(flow.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.fc = flow.nn.Linear(4, 2)
    ...     def forward(self, x):
    ...         return self.fc(x).relu()
    >>> Net()(flow.randn(3, 4)).shape
    flowserve.Size([3, 2])
    """

    training: bool

    def __init__(self):
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent_buffers", set())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_forward_pre_hooks", OrderedDict())
        object.__setattr__(self, "_forward_hooks", OrderedDict())
        object.__setattr__(self, "_structure_version", 0)  # counts replaced parameters, buffers, children
        object.__setattr__(self, "_assignments", 0)  # counts those and every other attribute set or deleted

    # -- attribute registration -----------------------------------------------------------

    def _check_init(self, name: str) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"cannot assign {name!r} before Module.__init__() call")

    def __setattr__(self, name: str, value) -> None:
        params, modules, buffers = (self.__dict__.get(k) for k in ("_parameters", "_modules", "_buffers"))
        if isinstance(value, Parameter):
            self._check_init("parameter")
            self._drop(name, keep=params)
            params[name] = value
        elif isinstance(value, Module):
            self._check_init("module")
            self._drop(name, keep=modules)
            modules[name] = value
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                                "(flowserve.nn.Parameter or None expected)")
            self._restructured()
            params[name] = None
        elif modules is not None and name in modules:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module '{name}' "
                                "(flowserve.nn.Module or None expected)")
            self._restructured()
            modules[name] = None
        elif buffers is not None and name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                                "(flowserve.Tensor or None expected)")
            self._set_buffer(name, value)
        else:
            object.__setattr__(self, name, value)
            self._touched()

    def _set_buffer(self, name: str, value) -> None:
        current = self._buffers.get(name)
        if current is not None and value is not None and current_trace() is not None:
            current._assign(value)  # a buffer updated inside nn.Graph.build is graph state
        else:
            self._restructured()
            self._buffers[name] = value

    def _drop(self, name: str, keep: dict | None = None) -> None:
        """Remove ``name`` from every store but ``keep``, where a replaced entry keeps its
        place (``named_parameters()`` and ``Sequential``'s order), as in PyTorch."""
        self._restructured()
        for d in (self.__dict__, self._parameters, self._modules, self._buffers):
            if d is not keep:
                d.pop(name, None)
        if keep is not self._buffers:
            self._non_persistent_buffers.discard(name)

    def _restructured(self) -> None:
        """A parameter, buffer, child module or hook is set, replaced or removed: an nn.Graph
        holding this module traces again at its next call (it reads tensors by identity)."""
        self.__dict__["_structure_version"] += 1
        self._touched()

    def _touched(self) -> None:
        """An attribute is set or deleted: an nn.Graph holding this module checks, at its
        next call, whether a value its trace read changed (``nn/graph/modes.py``)."""
        d = self.__dict__
        d["_assignments"] = d.get("_assignments", 0) + 1

    def __getattr__(self, name: str):
        d = self.__dict__
        for store in ("_parameters", "_buffers", "_modules"):
            if store in d and name in d[store]:
                return d[store][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        if name in self._parameters or name in self._buffers or name in self._modules:
            self._drop(name)
        else:
            object.__delattr__(self, name)
            self._touched()

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._buffers) | set(self._modules))

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        self._check_init("parameter")
        if "." in name or not name:
            raise KeyError(f"parameter name can't contain '.' or be empty, got {name!r}")
        self._drop(name, keep=self._parameters)
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        self._check_init("buffer")
        if "." in name or not name:
            raise KeyError(f"buffer name can't contain '.' or be empty, got {name!r}")
        self._drop(name, keep=self._buffers)
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers.discard(name)
        else:
            self._non_persistent_buffers.add(name)

    def add_module(self, name: str, module: "Module | None") -> None:
        self._check_init("module")
        if "." in name or not name:
            raise KeyError(f"module name can't contain '.' or be empty, got {name!r}")
        self._drop(name, keep=self._modules)
        self._modules[name] = module

    register_module = add_module

    def get_submodule(self, target: str) -> "Module":
        mod = self
        for part in target.split(".") if target else []:
            if part not in mod._modules:
                raise AttributeError(f"{type(mod).__name__} has no submodule {part!r} (looking up {target!r})")
            mod = mod._modules[part]
        return mod

    # -- calling --------------------------------------------------------------------------

    def forward(self, *args, **kwargs):
        raise FlowserveError(f"Module [{type(self).__name__}] is missing the required \"forward\" function")

    def __call__(self, *args, **kwargs):
        for hook in list(self._forward_pre_hooks.values()):
            result = hook(self, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
        tracer = current_trace()
        if tracer is not None:
            out = tracer.call_module(self, args, kwargs)
        else:
            out = self.forward(*args, **kwargs)
        for hook in list(self._forward_hooks.values()):
            result = hook(self, args, out)
            if result is not None:
                out = result
        return out

    def register_forward_pre_hook(self, hook):
        return _HookHandle(self, self._forward_pre_hooks, hook)

    def register_forward_hook(self, hook):
        return _HookHandle(self, self._forward_hooks, hook)

    # -- traversal ------------------------------------------------------------------------

    def named_modules(self, memo=None, prefix: str = "", remove_duplicate: bool = True):
        memo = set() if memo is None else memo
        stack = [(prefix, self)]
        while stack:
            name, mod = stack.pop()
            if remove_duplicate and id(mod) in memo:
                continue
            memo.add(id(mod))
            yield name, mod
            children = [(f"{name}.{k}" if name else k, m) for k, m in mod._modules.items() if m is not None]
            stack.extend(reversed(children))

    def modules(self) -> Iterator["Module"]:
        for _, m in self.named_modules():
            yield m

    def named_children(self):
        seen = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self) -> Iterator["Module"]:
        for _, m in self.named_children():
            yield m

    def _named_members(self, store: str, prefix: str, recurse: bool):
        seen = set()
        mods = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for mod_name, mod in mods:
            for name, value in getattr(mod, store).items():
                if value is None or id(value) in seen:
                    continue
                seen.add(id(value))
                yield (f"{mod_name}.{name}" if mod_name else name), value

    def named_parameters(self, prefix: str = "", recurse: bool = True):
        return self._named_members("_parameters", prefix, recurse)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True):
        return self._named_members("_buffers", prefix, recurse)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    # -- state ----------------------------------------------------------------------------

    def state_dict(self, destination=None, prefix: str = "", keep_vars: bool = False):
        out = OrderedDict() if destination is None else destination
        for mod_name, mod in self.named_modules(prefix=prefix.rstrip("."), remove_duplicate=False):
            base = f"{mod_name}." if mod_name else ""
            for name, p in mod._parameters.items():
                if p is not None:
                    out[base + name] = p if keep_vars else p.detach()
            for name, b in mod._buffers.items():
                if b is not None and name not in mod._non_persistent_buffers:
                    out[base + name] = b if keep_vars else b.detach()
        return out

    def load_state_dict(self, state_dict, strict: bool = True):
        return load_module_state(self, state_dict, strict)

    def train(self, mode: bool = True) -> "Module":
        for m in self.modules():
            object.__setattr__(m, "training", bool(mode))
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parameters():
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                p.grad = p.grad * 0

    def apply(self, fn) -> "Module":
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def _apply_to_tensors(self, fn) -> "Module":
        for m in self.modules():
            for store in (m._parameters, m._buffers):
                for name, t in store.items():
                    if t is not None:
                        new = fn(t)
                        if new is not t:
                            if new.dtype != t.dtype or new.device != t.device:
                                m._restructured()  # a graph's inputs for it change kind
                            t.data = new
        return self

    def to_global(self, placement=None, sbp=None) -> "Module":
        """Make every parameter and buffer global, in place (OneFlow's ``Module.to_global``):
        ``sbp`` is one sbp for all, or a function ``sbp(tensor) -> sbp`` choosing per tensor
        (OneFlow's ``global_view`` convention). Parameters become global Parameters (new
        objects, registered in their place; a tensor shared by two modules stays shared):
        build the optimizer from ``model.parameters()`` after the conversion. A local tensor
        is the whole logical tensor (rank 0's value), cut into pieces for a split, so every
        layer keeps its sizes; a global one is converted to the new sbp.

        Data parallelism is ``model.to_global(placement, flow.sbp.broadcast)`` with a
        ``split(0)`` batch; model parallelism splits chosen weights, for example
        ``model.fc1.to_global(placement, flow.sbp.split(0))``."""
        if placement is None:
            placement = next((t.placement for t in self._tensors() if t.is_global), None)
            if placement is None:
                raise DistributedError("Module.to_global of a local module needs placement= "
                                       "(for example flow.placement.all('cpu'))")
        if sbp is None:
            raise DistributedError("Module.to_global needs sbp=: one sbp (flow.sbp.broadcast) or a function "
                                   "tensor -> sbp")
        choose = sbp if callable(sbp) and not isinstance(sbp, (sbp_types.sbp, list, tuple)) else (lambda t: sbp)
        memo: dict = {}
        for m in self.modules():
            for store in (m._parameters, m._buffers):
                for name, t in list(store.items()):
                    if t is None:
                        continue
                    if id(t) not in memo:
                        memo[id(t)] = _to_global(t, placement, choose(t))
                    store[name] = memo[id(t)]
        return self

    def _tensors(self):
        for m in self.modules():
            yield from (t for t in m._parameters.values() if t is not None)
            yield from (t for t in m._buffers.values() if t is not None)

    def to(self, *args, **kwargs) -> "Module":
        """Move parameters and buffers to a device (``"cuda"``) or a floating dtype, in place."""
        return self._apply_to_tensors(
            lambda t: t.to(*args, **kwargs) if t.is_floating_point() else t.to(
                *[a for a in args if not _is_dtype(a)], **{k: v for k, v in kwargs.items() if k != "dtype"}))

    def cuda(self, index: int = 0) -> "Module":
        return self.to(f"cuda:{index}")

    def cpu(self) -> "Module":
        return self.to("cpu")

    def float(self) -> "Module":
        return self.to(dtypes.float32)

    def double(self) -> "Module":
        return self.to(dtypes.float64)

    def half(self) -> "Module":
        return self.to(dtypes.float16)

    # -- printing -------------------------------------------------------------------------

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = []
        for name, m in self._modules.items():
            child = repr(m).replace("\n", "\n  ")
            lines.append(f"({name}): {child}")
        head = f"{type(self).__name__}({self.extra_repr()}"
        if not lines:
            return head + ")"
        return head + "\n  " + "\n  ".join(lines) + "\n)"


def _to_global(t: Tensor, placement, sbp) -> Tensor:
    """One parameter or buffer of ``Module.to_global``: a leaf, its gradient converted too."""
    grad = t.grad
    with no_grad():
        out = t if t.is_global else t.to_global(placement=placement, sbp=sbp_types.broadcast)  # the whole tensor
        out = out.to_global(sbp=sbp)
        if out is not t and not isinstance(t, Parameter):
            out = out.detach()  # a buffer: a plain global tensor, without history
        if grad is not None and out is not t:
            grad = grad if grad.is_global else grad.to_global(placement=placement, sbp=sbp_types.broadcast)
            out.grad = grad
    return out


def _is_dtype(a) -> bool:
    return isinstance(a, dtypes.dtype)


class _HookHandle:
    """A registered hook; adding or removing one changes what the module computes, so an
    nn.Graph holding the module traces again (``Module._restructured``)."""

    _next_id = 0

    def __init__(self, module: Module, store: dict, hook):
        _HookHandle._next_id += 1
        self.id, self.store, self.module = _HookHandle._next_id, store, weakref.ref(module)
        store[self.id] = hook
        module._restructured()

    def remove(self) -> None:
        if self.store.pop(self.id, None) is not None and (module := self.module()) is not None:
            module._restructured()
