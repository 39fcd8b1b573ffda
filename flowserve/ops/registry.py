"""The op registry: one declaration per primitive, and ``bind``, the one entry point.

A primitive carries its rules side by side (JAX's style):

- ``kernel(xp, *arrays, **attrs)``: the computation, written against the array module
  ``xp`` of the inputs' device (numpy, or CuPy on a GPU);
- ``shape(*metas, **attrs)``: output metadata from input metadata, raising
  ``ShapeError``/``DTypeError`` that name the op, the expected and the given;
- ``vjp(ctx, *grads)``: the input gradients, written with flowserve ops so that the same
  rule builds the eager tape and the symbolic backward of an ``nn.Graph``;
- the ONNX lowering, registered under the op's name in ``flowserve.exporter.lowering``.

``bind`` runs the kernel in eager mode, or records an IR node while an ``nn.Graph`` is
being traced; either way it records a tape node when gradients are wanted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from flowserve import dtypes
from flowserve.errors import DTypeError, FlowserveError, ShapeError


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

    def __call__(self, *inputs, **attrs):
        return bind(self, inputs, attrs)

    def __repr__(self) -> str:
        return f"Primitive({self.name})"


REGISTRY: dict[str, Primitive] = {}


def primitive(name: str, *, shape: Callable, vjp: Callable | None = None,
              differentiable: bool = True, multiple_results: bool = False):
    """Declare a primitive from its kernel: ``@primitive("relu", shape=same_shape, vjp=...)``."""

    def register(kernel: Callable) -> Primitive:
        if name in REGISTRY:
            raise FlowserveError(f"primitive {name!r} is declared twice")
        if differentiable and vjp is None:
            raise FlowserveError(f"primitive {name!r} is differentiable but has no vjp")
        prim = Primitive(name, kernel, shape, vjp, differentiable, multiple_results)
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
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def normalize_axis(op: str, axis: int, ndim: int) -> int:
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        fail_shape(op, f"dim in [{-max(ndim, 1)}, {max(ndim, 1) - 1}]", f"dim {axis} for a {ndim}-d input")
    return axis % max(ndim, 1)


# -- the active trace and grad mode ----------------------------------------------------


class _State:
    """Process-wide switches, read on every bind: the active tracer and grad mode."""

    trace = None  # a flowserve.ir.tracer.Tracer while nn.Graph.build runs
    grad_enabled = True


STATE = _State()


# -- bind ------------------------------------------------------------------------------


def bind(prim: Primitive, inputs: tuple, attrs: dict):
    """Run or record ``prim`` on tensors ``inputs``; returns a tensor or a tuple."""
    if STATE.trace is not None:
        outputs = STATE.trace.record(prim, inputs, attrs)
        inputs = STATE.trace.lifted
    else:
        outputs = _run_eager(prim, inputs, attrs)
    if STATE.grad_enabled and prim.differentiable:
        for t in inputs:
            if t._requires_grad:
                _record_tape(prim, inputs, outputs, attrs)
                break
    return outputs if prim.multiple_results else outputs[0]


def _run_eager(prim: Primitive, inputs: tuple, attrs: dict) -> tuple:
    device = inputs[0]._device if inputs else None
    for t in inputs:
        if t._device is not device and t._device != device:
            raise FlowserveError(
                f"{prim.name} expected all tensors on one device, got {device} and {t._device}")
    try:
        result = prim.kernel(device.xp if device is not None else None, *[t._data for t in inputs], **attrs)
    except FlowserveError:
        raise
    except Exception as exc:
        explain_failure(prim, inputs, attrs, exc)
    wrap = _tensor_class()._wrap
    if not prim.multiple_results:
        return (wrap(result, device),)
    return tuple(wrap(r, device) for r in result)


_TENSOR = []


def _tensor_class():
    if not _TENSOR:
        from flowserve.tensor import Tensor

        _TENSOR.append(Tensor)
    return _TENSOR[0]


def explain_failure(prim: Primitive, inputs, attrs, exc: Exception):
    """A kernel failed: let the shape rule say why, or wrap the array library's error."""
    metas = [t.meta for t in inputs]
    prim.shape(*metas, **attrs)  # raises the op's own clear error when the inputs are wrong
    given = ", ".join(str(m) for m in metas)
    raise FlowserveError(f"{prim.name} failed on inputs ({given}): {exc}") from exc


def infer_meta(prim: Primitive, metas, attrs) -> tuple:
    out = prim.shape(*metas, **attrs)
    return tuple(out) if prim.multiple_results else (out,)


class TapeNode:
    """One recorded op: what its vjp needs, and where each input's gradient goes."""

    __slots__ = ("prim", "attrs", "inputs", "outputs", "parents")

    def __init__(self, prim, attrs, inputs, outputs, parents):
        self.prim = prim
        self.attrs = attrs
        self.inputs = inputs
        self.outputs = outputs
        self.parents = parents

    def needs(self, i: int) -> bool:
        """Whether input ``i`` wants a gradient (vjp rules skip the others)."""
        return self.parents[i] is not None

    def name(self) -> str:
        return f"{self.prim.name}Backward"

    def __repr__(self) -> str:
        return f"<{self.name()}>"


def _record_tape(prim, inputs, outputs, attrs) -> None:
    parents = tuple(
        (t._node, t._out_index, t) if t.requires_grad else None for t in inputs
    )
    node = TapeNode(prim, attrs, tuple(t._alias() for t in inputs),
                    tuple(t._alias() for t in outputs), parents)
    for i, out in enumerate(outputs):
        if out.dtype.is_floating_point:
            out._requires_grad = True
            out._node = node
            out._out_index = i
