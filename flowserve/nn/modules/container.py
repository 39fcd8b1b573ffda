"""Containers: Sequential, ModuleList, ModuleDict."""

from __future__ import annotations

from collections import OrderedDict

from flowserve.nn.module import Module
from flowserve.nn.parameter import Parameter


class _IndexedModules(Module):
    """Children keyed ``"0"``, ``"1"``, ... in order, indexed as a list (PyTorch's rules:
    deleting renumbers, ``insert`` shifts, an index out of range is an ``IndexError``)."""

    def _key(self, index: int) -> str:
        keys = list(self._modules)
        if not -len(keys) <= index < len(keys):
            raise IndexError(f"index {index} is out of range for {type(self).__name__} of length {len(keys)}")
        return keys[index]

    def _renumber(self, modules: list) -> None:
        self._restructured()
        self._modules.clear()
        self._modules.update((str(i), m) for i, m in enumerate(modules))

    def __setitem__(self, index: int, module: Module) -> None:
        setattr(self, self._key(index), module)

    def __delitem__(self, index) -> None:
        keys = list(self._modules)
        gone = set(keys[index]) if isinstance(index, slice) else {self._key(index)}
        self._renumber([m for k, m in self._modules.items() if k not in gone])

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module: Module):
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules):
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module: Module):
        if not isinstance(module, Module):
            raise TypeError(f"{type(self).__name__}.insert expects an nn.Module, got {type(module).__name__}")
        n = len(self)
        if not -n <= index <= n:
            raise IndexError(f"index {index} is out of range for inserting into {type(self).__name__} of length {n}")
        modules = list(self._modules.values())
        modules.insert(index, module)
        self._renumber(modules)
        return self

    def pop(self, index=-1):
        module = self[index]
        del self[index]
        return module


class Sequential(_IndexedModules):
    """Modules called in order: ``nn.Sequential(nn.Linear(3, 1), nn.Flatten(0, 1))``."""

    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            for name, m in modules[0].items():
                self.add_module(name, m)
        else:
            for i, m in enumerate(modules):
                self.add_module(str(i), m)

    def __getitem__(self, index):
        items = list(self._modules.items())
        if isinstance(index, slice):
            return Sequential(OrderedDict(items[index]))
        return self._modules[self._key(index)]

    def __add__(self, other: "Sequential") -> "Sequential":
        return Sequential(*self, *other)

    def __iadd__(self, other: "Sequential") -> "Sequential":
        return self.extend(other)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x


class ModuleList(_IndexedModules):
    def __init__(self, modules=None):
        super().__init__()
        for m in modules or []:
            self.append(m)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return ModuleList(list(self._modules.values())[index])
        return self._modules[self._key(index)]

    def __add__(self, other) -> "ModuleList":
        return ModuleList([*self, *other])

    def __iadd__(self, other) -> "ModuleList":
        return self.extend(other)


class ModuleDict(Module):
    def __init__(self, modules=None):
        super().__init__()
        for name, m in (modules or {}).items():
            self.add_module(name, m)

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        if key not in self._modules:
            raise KeyError(key)
        delattr(self, key)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def pop(self, key: str) -> Module:
        module = self[key]
        del self[key]
        return module

    def clear(self) -> None:
        for key in list(self._modules):
            del self[key]

    def update(self, modules) -> None:
        for key, module in (modules.items() if hasattr(modules, "items") else modules):
            self[key] = module

    def __contains__(self, key: str) -> bool:
        return key in self._modules

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()


class ParameterList(Module):
    """Parameters held in a list, registered as ``0``, ``1``, ... (PyTorch's keys)."""

    def __init__(self, values=None):
        super().__init__()
        for v in values or []:
            self.append(v)

    def _as_parameter(self, value):
        return value if isinstance(value, Parameter) else Parameter(value)

    def __getitem__(self, index):
        items = list(self._parameters.values())
        return ParameterList(items[index]) if isinstance(index, slice) else items[index]

    def __setitem__(self, index: int, value) -> None:
        key = list(self._parameters)[index]
        self.register_parameter(key, self._as_parameter(value))

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self):
        return iter(self._parameters.values())

    def append(self, value) -> "ParameterList":
        self.register_parameter(str(len(self)), self._as_parameter(value))
        return self

    def extend(self, values) -> "ParameterList":
        for v in values:
            self.append(v)
        return self

    def extra_repr(self) -> str:
        return "\n".join(f"({i}): Parameter containing: [size {tuple(p.shape)}]" for i, p in enumerate(self))


class ParameterDict(Module):
    """Parameters held by name."""

    def __init__(self, parameters=None):
        super().__init__()
        for name, value in (parameters or {}).items():
            self[name] = value

    def __getitem__(self, key: str):
        return self._parameters[key]

    def __setitem__(self, key: str, value) -> None:

        self.register_parameter(key, value if isinstance(value, Parameter) else Parameter(value))

    def __delitem__(self, key: str) -> None:
        if key not in self._parameters:
            raise KeyError(key)
        delattr(self, key)

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self):
        return iter(self._parameters)

    def __contains__(self, key: str) -> bool:
        return key in self._parameters

    def keys(self):
        return self._parameters.keys()

    def values(self):
        return self._parameters.values()

    def items(self):
        return self._parameters.items()

    def update(self, parameters) -> None:
        for name, value in dict(parameters).items():
            self[name] = value
