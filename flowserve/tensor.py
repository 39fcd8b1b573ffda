"""``Tensor``: an array on a device plus autograd metadata, or a lazy value while tracing.

This module holds what every layer needs of a tensor (data, device, dtype, autograd
metadata, values). The op methods and operators are mixin classes grouped by concept in
``flowserve.ops.tensor_methods`` (arithmetic, comparison, shape, reduction, indexing, ...):
they call the op functions, which make tensors, so ``Tensor`` cannot name them when it is
defined without an import circle; ``flowserve.ops`` makes them bases of ``Tensor`` with
``inherit_methods`` when it loads. Each op binds the registry's primitives: eager tensors run
kernels, lazy tensors (inside ``nn.Graph.build``) record IR.
"""

from __future__ import annotations

import warnings
import weakref

import numpy as np

from flowserve import dtypes
from flowserve._repr import tensor_repr
from flowserve.autograd import tape
from flowserve.device import CPU, as_device, to_device_array
from flowserve.dispatch import Meta, current_interpreter, current_trace
from flowserve.errors import AutogradError, GraphError

_BY_NUMPY = {d.np: d for d in dtypes.ALL}  # numpy dtype -> flowserve dtype, read by _wrap


class Size(tuple):
    """The shape of a tensor: a tuple that prints as ``flowserve.Size([2, 3])``."""

    def __repr__(self) -> str:
        return f"flowserve.Size({list(self)})"

    def numel(self) -> int:
        return int(np.prod(self, dtype=np.int64))


class MethodGroups:
    """The base ``Tensor`` is defined with; the op method groups go before it (see
    ``inherit_methods``)."""

    __slots__ = ()


def inherit_methods(cls: type, *groups: type) -> None:
    """Make the mixin classes ``groups`` bases of ``cls`` (ahead of those it has), so that
    ``cls`` inherits their methods. Each group declares ``__slots__ = ()``: a tensor keeps
    its fixed layout and gets no ``__dict__``."""
    for group in groups:
        if group.__dict__.get("__slots__") != ():
            raise TypeError(f"inherit_methods: {group.__name__} must declare __slots__ = (), got "
                            f"{group.__dict__.get('__slots__', 'none')}")
    cls.__bases__ = tuple(g for g in groups if g not in cls.__bases__) + cls.__bases__


class Tensor(MethodGroups):
    """A multi-dimensional array with autograd, as in PyTorch and OneFlow.

    >>> import flowserve as flow
    >>> x = flow.tensor([[1.0, 2.0]], requires_grad=True)
    >>> (x * x).sum().backward()
    >>> x.grad
    tensor([[2., 4.]], dtype=flowserve.float32)
    """

    __slots__ = ("_data", "_lazy", "_dtype", "_device", "_requires_grad", "_node",
                 "_out_index", "grad", "_version", "_hooks", "_aliases", "__weakref__")
    __array_priority__ = 1000  # numpy defers binary operators to Tensor

    def __init__(self, *args, dtype=None, device=None, requires_grad=False):
        """OneFlow's ``flow.Tensor(data)`` (``TensorWithDataCtor``) is a new float32 tensor
        holding a copy of ``data`` (an array, a sequence, a tensor), never sharing memory
        with it (``flow.from_numpy`` shares); ``flow.Tensor(2, 3)`` and
        ``flow.Tensor(flow.Size([2, 3]))`` are zeros of that size, ``flow.Tensor()`` is empty."""
        np_dtype = (dtypes.as_dtype(dtype) if dtype else dtypes.float32).np
        if len(args) == 1 and not isinstance(args[0], (int, Size)):
            data = np.array(array_from(args[0]), dtype=np_dtype, copy=True, order="C")
        else:
            data = np.zeros(tuple(args[0]) if len(args) == 1 and isinstance(args[0], Size) else args or (0,),
                            dtype=np_dtype)
        d = as_device(device) if device is not None else CPU
        self._set(to_device_array(data, d), None, d)
        self._requires_grad = bool(requires_grad)

    # -- construction helpers used by the ops -------------------------------------------

    def _set(self, data, lazy, device) -> None:
        self._data = data
        self._lazy = lazy
        self._dtype = dtypes.from_numpy(data.dtype) if data is not None else dtypes.from_name(lazy.dtype)
        self._device = device
        self._requires_grad = False
        self._node = None
        self._out_index = 0
        self.grad = None
        self._version = 0
        self._aliases = None

    @classmethod
    def _wrap(cls, data, device=CPU) -> "Tensor":
        """A tensor over ``data`` (the hot path of every eager op: kept minimal)."""
        t = object.__new__(Tensor)
        if type(data) is not np.ndarray and device.type == "cpu":
            data = np.asarray(data)
        t._data = data
        t._lazy = None
        t._dtype = _BY_NUMPY.get(data.dtype) or dtypes.from_numpy(data.dtype)
        t._device = device
        t._requires_grad = False
        t._node = None
        t._out_index = 0
        t.grad = None
        t._version = 0
        t._aliases = None
        return t

    @classmethod
    def _from_lazy(cls, value, device=CPU) -> "Tensor":
        t = object.__new__(Tensor)
        t._set(None, value, device)
        return t

    def _alias(self) -> "Tensor":
        """A new handle on the same data or lazy value, without autograd history. It is a
        snapshot: an in-place update of either handle leaves the other as it was (the
        autograd tape saves values this way); ``detach()`` makes a handle that shares."""
        t = object.__new__(Tensor)
        t._data, t._lazy, t._dtype, t._device = self._data, self._lazy, self._dtype, self._device
        t._requires_grad, t._node, t._out_index, t.grad, t._version, t._aliases = False, None, 0, None, 0, None
        return t

    def _shared_alias(self) -> "Tensor":
        """An ``_alias`` that shares this tensor's value, as ``detach()`` does in PyTorch: an
        in-place update of any tensor of the group is seen by all (see ``_set_value``)."""
        group = self._aliases
        if group is None:
            group = self._aliases = weakref.WeakValueDictionary({id(self): self})  # by id: == is elementwise
        t = self._alias()
        t._aliases = group
        group[id(t)] = t
        return t

    def _set_value(self, data) -> None:
        """Rebind this tensor's value to the array ``data``, and that of every tensor sharing
        its value (``detach()``, ``.data``); each one's version advances, so compiled graphs
        see the change. The array is never written into: the autograd tape's snapshots keep
        the values their ops saw."""
        self._data = data
        self._version += 1
        if self._aliases is not None:
            for t in self._aliases.values():
                if t is not self:
                    t._data = data
                    t._version += 1

    def _unshare(self) -> None:
        """Stop sharing this tensor's value with its ``detach()`` aliases (it takes a new
        value of its own: ``.data = value``, ``unsqueeze_``)."""
        if self._aliases is not None:
            self._aliases.pop(id(self), None)
            self._aliases = None

    def _assign(self, other: "Tensor") -> "Tensor":
        """In-place update: this tensor now holds ``other``'s value (PyTorch's ``x.op_()``)."""
        interpreter = current_interpreter()
        if interpreter.trace is not None:
            interpreter.trace.assign(self, other)
            return self
        if self._requires_grad and self._node is None and interpreter.grad_enabled:
            raise AutogradError(
                "a leaf Variable that requires grad is being used in an in-place operation.")
        if other._dtype is not self._dtype:
            other = other.to(self._dtype)
        self._set_value(other._data if other._data.shape == self._data.shape else
                        self._device.xp.broadcast_to(other._data, self._data.shape).copy())
        if interpreter.grad_enabled and other._requires_grad:
            self._requires_grad, self._node, self._out_index = True, other._node, other._out_index
        return self

    # -- metadata -------------------------------------------------------------------------

    @property
    def meta(self) -> Meta:
        return Meta(self.shape, self._dtype)

    @property
    def shape(self) -> Size:
        return Size(self._data.shape if self._lazy is None else self._lazy.shape)

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[dim]

    @property
    def dtype(self) -> dtypes.dtype:
        return self._dtype

    @property
    def device(self):
        return self._device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def dim(self) -> int:
        return self.ndim

    def numel(self) -> int:
        return self.shape.numel()

    nelement = numel

    def element_size(self) -> int:
        return self._dtype.itemsize

    @property
    def is_lazy(self) -> bool:
        return self._lazy is not None

    @property
    def is_cuda(self) -> bool:
        return self._device.type == "cuda"

    def is_floating_point(self) -> bool:
        return self._dtype.is_floating_point

    # -- autograd -------------------------------------------------------------------------

    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if self._node is not None and not value:
            raise AutogradError("you can only change requires_grad flags of leaf variables.")
        if value and not self._dtype.is_floating_point:
            raise AutogradError(f"only Tensors of floating point dtype can require gradients, got {self._dtype}")
        self._requires_grad = bool(value)

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        self.requires_grad = requires_grad
        return self

    @property
    def is_leaf(self) -> bool:
        return self._node is None

    @property
    def grad_fn(self):
        return self._node

    def register_hook(self, hook):
        """``hook(grad)`` runs when this tensor's gradient is computed; returning a tensor
        replaces the gradient. Returns a handle with ``remove()``."""
        if not self._requires_grad:
            raise AutogradError("cannot register a hook on a tensor that doesn't require gradient")
        return tape.add_hook(self, hook)

    def retain_grad(self) -> None:
        """Keep this non-leaf tensor's gradient in ``.grad`` after ``backward()``."""
        if self._node is None or self.retains_grad:
            return

        def keep(g):
            self.grad = g.detach() if self.grad is None else self.grad + g.detach()

        keep.retains_grad_of = self
        tape.add_hook(self, keep)

    @property
    def retains_grad(self) -> bool:
        hooks = (self._node.hooks or {}).get(self._out_index, {}) if self._node is not None else {}
        return any(getattr(h, "retains_grad_of", None) is self for h in hooks.values())

    @property
    def data(self) -> "Tensor":
        """This tensor's value without autograd history; assigning replaces the value."""
        return self._detached()

    @data.setter
    def data(self, value: "Tensor") -> None:
        trace = current_trace()
        if trace is not None and self._lazy is None and (trace.lazy_of(self) is not None or value._lazy is not None):
            trace.assign(self, value._detached())  # inside build: an update of the graph's state (or an error)
            return
        self._unshare()
        self._data, self._lazy, self._dtype, self._device = value._data, value._lazy, value._dtype, value._device
        self._version += 1

    def detach(self) -> "Tensor":
        return self._detached()

    def _detached(self) -> "Tensor":
        """A handle that shares this tensor's value, without autograd history: an in-place
        update of either is seen by both, as in PyTorch. Inside
        ``nn.Graph.build``, a graph's state (parameter, buffer, optimizer state) detaches to
        its traced value, so the graph reads the state on every call rather than a copy
        taken when it was traced."""
        trace = current_trace()
        if trace is not None and self._lazy is None:
            lazy = trace.lazy_of(self)
            if lazy is not None:
                return lazy._alias()
        return self._shared_alias() if self._lazy is None else self._alias()

    def detach_(self) -> "Tensor":
        self._requires_grad, self._node = False, None
        return self

    # -- values ---------------------------------------------------------------------------

    def _eager_data(self, what: str):
        if self._lazy is not None:
            fed = f", the per-call value {self._lazy.name!r}" if self._lazy.name.startswith("System-") else ""
            raise GraphError(
                f"{what} needs a value, but this is a lazy tensor inside nn.Graph.build "
                f"(size={tuple(self.shape)}{fed}); return it from build() to get its value, or compute with "
                "tensor ops (flow.where for a branch)")
        trace = current_trace()
        if trace is not None and trace.lazy_of(self) is not None:
            warnings.warn(
                f"{what} of graph state (size={tuple(self.shape)}) inside nn.Graph.build reads its value when "
                "the graph is traced, and the graph keeps that value on every call; use detach() (or "
                "flow.tensor(t)) to read the state the graph holds when it runs", UserWarning, stacklevel=3)
        return self._data

    def numpy(self) -> np.ndarray:
        data = self._eager_data("Tensor.numpy()")
        return data if self._device.type == "cpu" else data.get()

    def item(self):
        data = self._eager_data("Tensor.item()")
        if data.size != 1:
            raise GraphError(f"only one element tensors can be converted to Python scalars, got size {tuple(data.shape)}")
        return data.reshape(()).item() if self._dtype is not dtypes.bfloat16 else float(data.reshape(()))

    def tolist(self):
        return self.numpy().tolist()

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a.astype(dtype) if dtype is not None else a

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if self._dtype.is_floating_point:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __bool__(self) -> bool:
        return bool(self.item())

    def __format__(self, spec: str) -> str:
        if self._lazy is None and self.numel() == 1:
            return format(self.item(), spec)
        return format(repr(self), spec)

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return tensor_repr(self)

    # -- devices and dtypes ---------------------------------------------------------------

    def cpu(self) -> "Tensor":
        return self.to("cpu")

    def cuda(self, index: int = 0) -> "Tensor":
        return self.to(f"cuda:{index}")

    def type_as(self, other: "Tensor") -> "Tensor":
        return self.to(other.dtype)

    def float(self):
        return self.to(dtypes.float32)

    def double(self):
        return self.to(dtypes.float64)

    def half(self):
        return self.to(dtypes.float16)

    def bfloat16(self):
        return self.to(dtypes.bfloat16)

    def long(self):
        return self.to(dtypes.int64)

    def int(self):
        return self.to(dtypes.int32)

    def bool(self):
        return self.to(dtypes.bool_)


def from_array(data, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A tensor over the array ``data`` (cast to ``dtype``, moved to ``device``): the building
    block of ``flowserve.ops.creation`` and of the ops that make index or mask tensors."""
    if dtype is not None:
        data = data.astype(dtypes.as_dtype(dtype).np, copy=False)
    d = as_device(device) if device is not None else CPU
    t = Tensor._wrap(to_device_array(data, d), d)
    if requires_grad:
        t.requires_grad = True
    return t


def array_from(data, default_dtype=None) -> np.ndarray:
    """numpy array of ``data`` (nested lists, scalars, arrays, tensors)."""
    if isinstance(data, Tensor):
        return data.numpy()
    if isinstance(data, (list, tuple)) and any(isinstance(x, Tensor) for x in data):
        data = [array_from(x) for x in data]
    arr = np.asarray(data)
    if default_dtype is not None and arr.dtype == np.float64 and not isinstance(data, np.ndarray):
        arr = arr.astype(default_dtype.np)  # Python floats become the default float dtype
    if arr.dtype.kind == "U" or arr.dtype == object:
        raise TypeError(f"cannot make a tensor of {type(data).__name__} holding {arr.dtype} values")
    return arr
