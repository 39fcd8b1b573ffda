"""How each fused group (a ``fused.<Kind>`` IR node) becomes ONNX, per target.

``portable``: a model-local function in the ``flowserve`` domain whose body is plain
``ai.onnx`` (ONNX Runtime inlines it at load; ``onnx.reference`` runs it too).
``onnxruntime``: ONNX Runtime's fused kernel (``com.microsoft``) where one exists,
else the same function.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from flowserve.errors import ExportError
from flowserve.exporter.passes.export_graph import FUSED_PREFIX
from flowserve.exporter.passes.act_match import clip_bounds
from flowserve.onnx_backend.versions import MS_DOMAIN

TARGETS = ("portable", "onnxruntime")
ORT_ACTIVATIONS = {"relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid"}
_EMITTERS: dict[str, Callable] = {}


def emitter(kind: str):
    def register(fn: Callable) -> Callable:
        _EMITTERS[kind] = fn
        return fn

    return register


def fused_lowerings(target: str) -> dict:
    """Op name -> lowering for every fused kind, bound to ``target``."""
    if target not in TARGETS:
        raise ExportError(f"target must be one of {', '.join(TARGETS)}, got {target!r}")
    return {FUSED_PREFIX + kind: _bound(fn, target) for kind, fn in _EMITTERS.items()}


def _bound(fn: Callable, target: str) -> Callable:
    def lower(b, node, ctx):
        fn(b, node, ctx, target)

    return lower


# -- activations, shared by every body ---------------------------------------------------


def activation(fb, x: str, act: str | None) -> str:
    """``act(x)`` in plain ONNX; ``act`` is an IR activation name or None."""
    if act is None:
        return x
    if act in ORT_ACTIVATIONS:
        return fb.op1(ORT_ACTIVATIONS[act], [x])
    if act in ("gelu", "gelu_tanh"):
        return _gelu(fb, x, act == "gelu_tanh")
    if act == "silu":
        return fb.op1("Mul", [x, fb.op1("Sigmoid", [x])])
    if act.startswith("clip:"):
        lo, hi = clip_bounds(act)
        return fb.op1("Clip", [x, fb.const(lo, np.float32), fb.const(hi, np.float32)])
    raise ExportError(f"fused activation {act!r} has no ONNX form")


def _gelu(fb, x: str, tanh: bool) -> str:
    """GELU in opset-13 primitives (``onnx.reference`` lacks a ``Gelu`` kernel; ONNX Runtime
    fuses this pattern back into its Gelu/FastGelu)."""
    f32 = np.float32
    if tanh:
        cube = fb.op1("Mul", [fb.op1("Mul", [x, x]), x])
        inner = fb.op1("Add", [x, fb.op1("Mul", [cube, fb.const(0.044715, f32)])])
        core = fb.op1("Tanh", [fb.op1("Mul", [inner, fb.const(np.sqrt(2.0 / np.pi), f32)])])
    else:
        core = fb.op1("Erf", [fb.op1("Mul", [x, fb.const(1.0 / np.sqrt(2.0), f32)])])
    half_x = fb.op1("Mul", [x, fb.const(0.5, f32)])
    return fb.op1("Mul", [half_x, fb.op1("Add", [core, fb.const(1.0, f32)])])


def ort_activation(b, y: str, act: str | None, out: str) -> None:
    """``out = act(y)`` with ONNX Runtime's kernels (``com.microsoft`` where they are faster)."""
    if act == "silu":
        b.op("QuickGelu", [y], [out], domain=MS_DOMAIN, alpha=1.0)
    elif act == "gelu":
        b.op("Gelu", [y], [out], domain=MS_DOMAIN)
    elif act == "gelu_tanh":
        b.op("FastGelu", [y], [out], domain=MS_DOMAIN)
    elif act is None:
        b.op("Identity", [y], [out])
    elif act in ORT_ACTIVATIONS:
        b.op(ORT_ACTIVATIONS[act], [y], [out])
    else:
        lo, hi = clip_bounds(act)
        b.op("Clip", [y, b.const(lo, np.float32), b.const(hi, np.float32)], [out])


def variant(kind: str, act: str | None, *extra) -> str:
    """The function name of one body: ``Gemm_relu``, ``Conv_k3_s2_g32_relu``."""
    parts = [kind] + [str(e) for e in extra if e not in (None, "")] + ([act] if act else [])
    return "_".join(parts)


def load_emitters() -> None:
    """Import the modules that register emitters (one per fused family)."""
    from flowserve.exporter.emit import attention, conv, linear, norm_act  # noqa: F401  # local: emitters import this module to register
