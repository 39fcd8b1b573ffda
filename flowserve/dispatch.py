"""The dispatch seam: one declaration per primitive, the interpreters, and ``bind``.

This is the bottom of flowserve's core: it knows no ``Tensor`` and no op (JAX's ``core``).

A primitive carries its rules side by side (JAX's style):

- ``kernel(xp, *arrays, **attrs)``: the computation, written against the array module
  ``xp`` of the inputs' device (numpy, or CuPy on a GPU);
- ``shape(*metas, **attrs)``: output metadata from input metadata, raising
  ``ShapeError``/``DTypeError`` that name the op, the expected and the given;
- ``vjp(ctx, *grads)``: the input gradients, written with flowserve ops so that the same
  rule builds the eager tape and the symbolic backward of an ``nn.Graph``;
- the ONNX lowering, registered by the primitive object in the backend's module of the same
  family (``flowserve.onnx_backend.lowering.<family>``: ``@lowering(prims.gather)``).

``bind`` is the one entry point: it hands each call to the current ``Interpreter`` (a
context variable, so per thread and per asyncio task), which runs the kernel in eager mode
or records an IR node while an ``nn.Graph`` is being traced, and returns the results;
either way a tape node (``flowserve.autograd.tape``) is recorded when gradients are wanted.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Callable

from flowserve import dtypes
from flowserve.autograd import tape
from flowserve.errors import DeviceError, DistributedError, DTypeError, FlowserveError, ShapeError


@dataclass(frozen=True)
class Meta:
    """What a shape rule knows of a tensor: its shape and dtype."""

    shape: tuple
    dtype: dtypes.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __str__(self) -> str:
        return f"{tuple(self.shape)} {self.dtype.name}"


@dataclass(frozen=True)
class Primitive:
    name: str
    kernel: Callable
    shape: Callable
    vjp: Callable | None
    differentiable: bool
    multiple_results: bool
    result_device: Callable | None  # attrs -> the outputs' device, for a device move

    def __call__(self, *inputs, **attrs):
        """``prim(x, y, axis=1)``: ``bind`` (inlined here, the eager hot path)."""
        if not inputs:
            raise FlowserveError(f"{self.name} was called without tensor inputs")
        outputs = _INTERPRETER.get().process(self, inputs, attrs)
        return outputs if self.multiple_results else outputs[0]

    def __repr__(self) -> str:
        return f"Primitive({self.name})"


REGISTRY: dict[str, Primitive] = {}


class GlobalOperand(DistributedError):
    """Raised where a kernel would read a global tensor's values: ``bind`` then hands the
    call to the global-tensor rules (``flowserve.distributed.sbp_rules``), which run the
    primitive on the local pieces. Costs nothing on the local hot path."""


_GLOBAL_RULES: list = []  # the one global-tensor interpreter, registered by flowserve.distributed


def set_global_rules(process: Callable) -> None:
    """Register ``process(prim, inputs, attrs) -> outputs`` for calls with global tensors."""
    _GLOBAL_RULES[:] = [process]


def primitive(name: str, *, shape: Callable, vjp: Callable | None = None, differentiable: bool = True,
              multiple_results: bool = False, result_device: Callable | None = None):
    """Declare a primitive from its kernel: ``@primitive("relu", shape=same_shape, vjp=...)``."""

    def register(kernel: Callable) -> Primitive:
        if name in REGISTRY:
            raise FlowserveError(f"primitive {name!r} is declared twice")
        if differentiable and vjp is None:
            raise FlowserveError(f"primitive {name!r} is differentiable but has no vjp")
        prim = Primitive(name, kernel, shape, vjp, differentiable, multiple_results, result_device)
        REGISTRY[name] = prim
        return prim

    return register


# -- shape-rule helpers ----------------------------------------------------------------


def fail_shape(op: str, expected: str, given) -> None:
    raise ShapeError(f"{op} expected {expected}, got {given}")


def fail_dtype(op: str, expected: str, given) -> None:
    raise DTypeError(f"{op} expected {expected}, got {given}")


def broadcast_shapes(op: str, *shapes) -> tuple:
    ndim = max(len(s) for s in shapes)
    out = []
    for axis in range(-ndim, 0):
        dims = {s[axis] for s in shapes if len(s) >= -axis} - {1}
        if len(dims) > 1:
            given = " and ".join(str(tuple(s)) for s in shapes)
            fail_shape(op, "shapes that broadcast together", f"{given} (dim {axis} differs)")
        present = [s[axis] for s in shapes if len(s) >= -axis and (s[axis] != 1 or not dims)]
        out.append(max(present, key=lambda d: type(d) is not int))  # keeps a batch mark (ops.dims)
    return tuple(out)


def normalize_axis(op: str, axis: int, ndim: int) -> int:
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        fail_shape(op, f"dim in [{-max(ndim, 1)}, {max(ndim, 1) - 1}]", f"dim {axis} for a {ndim}-d input")
    return axis % max(ndim, 1)


# -- interpreters: what bind does with a primitive ------------------------------------


class Interpreter(ABC):
    """What ``bind`` does with a primitive call; the current one lives in a context
    variable, so each thread and asyncio task has its own (JAX's trace stack).

    ``EvalInterpreter`` runs kernels; ``flowserve.ir.tracer.TraceInterpreter`` records IR
    nodes while an ``nn.Graph`` is built. Both record the autograd tape when
    ``grad_enabled`` and an input requires grad.
    """

    __slots__ = ("grad_enabled",)
    trace = None  # the Tracer being recorded into, if any

    def __init__(self, grad_enabled: bool):
        self.grad_enabled = grad_enabled

    @abstractmethod
    def process(self, prim: "Primitive", inputs: tuple, attrs: dict) -> tuple:
        """Run or record ``prim`` on ``inputs``; returns its outputs as a tuple."""

    @abstractmethod
    def with_grad(self, enabled: bool) -> "Interpreter":
        """This interpreter with grad mode ``enabled``."""


class EvalInterpreter(Interpreter):
    """Eager mode: run the kernel on the inputs' device; outputs are the inputs' kind of
    tensor (``inputs[0]._wrap``), so this layer needs no ``Tensor`` import."""

    __slots__ = ()

    def process(self, prim, inputs, attrs):
        first = inputs[0]
        device = first._device
        try:  # one and two inputs (most ops) skip building an argument list: the hot path
            if len(inputs) == 1:
                result = prim.kernel(device.xp, first._data, **attrs)
            elif len(inputs) == 2 and inputs[1]._device is device:
                result = prim.kernel(device.xp, first._data, inputs[1]._data, **attrs)
            else:
                result = prim.kernel(device.xp, *_arrays_on_one_device(prim, inputs), **attrs)
        except GlobalOperand:  # a global tensor among the inputs (flowserve.distributed.global_tensor)
            return _GLOBAL_RULES[0](prim, inputs, attrs)
        except FlowserveError:
            raise
        except Exception as exc:
            explain_failure(prim, inputs, attrs, exc)
        if prim.result_device is not None:
            device = prim.result_device(**attrs)
        if prim.multiple_results:
            outputs = tuple(first._wrap(r, device) for r in result)
        else:
            outputs = (first._wrap(result, device),)
        if self.grad_enabled and prim.differentiable:  # tape.record_if_wanted, inlined: hot path
            for t in inputs:
                if t._requires_grad:
                    tape.record(prim, inputs, outputs, attrs)
                    break
        return outputs

    def with_grad(self, enabled):
        return EVAL_GRAD if enabled else EVAL_NO_GRAD


def _arrays_on_one_device(prim, inputs) -> list:
    device = inputs[0]._device
    for t in inputs:
        if t._device is not device and t._device != device:
            raise DeviceError(
                f"{prim.name} expected all tensors on one device, got {device} and {t._device}")
    return [t._data for t in inputs]


EVAL_GRAD = EvalInterpreter(True)
EVAL_NO_GRAD = EvalInterpreter(False)
_INTERPRETER: ContextVar[Interpreter] = ContextVar("flowserve_interpreter", default=EVAL_GRAD)


def current_interpreter() -> Interpreter:
    return _INTERPRETER.get()


def current_trace():
    """The ``Tracer`` recording in this thread/task, or ``None`` in eager mode."""
    return _INTERPRETER.get().trace


def grad_enabled() -> bool:
    return _INTERPRETER.get().grad_enabled


def push_interpreter(interpreter: Interpreter) -> Token:
    """Make ``interpreter`` current; give the token back to ``pop_interpreter``."""
    return _INTERPRETER.set(interpreter)


def pop_interpreter(token: Token) -> None:
    _INTERPRETER.reset(token)


# -- bind ------------------------------------------------------------------------------


def bind(prim: Primitive, inputs: tuple, attrs: dict):
    """Hand ``prim`` on tensors ``inputs`` to the current interpreter; returns a tensor,
    or a tuple for a primitive with multiple results."""
    if not inputs:
        raise FlowserveError(f"{prim.name} was called without tensor inputs")
    outputs = _INTERPRETER.get().process(prim, inputs, attrs)
    return outputs if prim.multiple_results else outputs[0]


def explain_failure(prim: Primitive, inputs, attrs, exc: Exception):
    """A kernel failed: let the shape rule say why, or wrap the array library's error."""
    metas = [t.meta for t in inputs]
    prim.shape(*metas, **attrs)  # raises the op's own clear error when the inputs are wrong
    given = ", ".join(str(m) for m in metas)
    raise FlowserveError(f"{prim.name} failed on inputs ({given}): {exc}") from exc


def infer_meta(prim: Primitive, metas, attrs) -> tuple:
    out = prim.shape(*metas, **attrs)
    return tuple(out) if prim.multiple_results else (out,)
