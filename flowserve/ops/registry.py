"""The op registry as the op families see it: the names of ``flowserve.dispatch`` (the
primitives' declaration, their shape-rule helpers, the interpreters and ``bind``)."""

from flowserve.dispatch import (  # noqa: F401
    EVAL_GRAD,
    EVAL_NO_GRAD,
    REGISTRY,
    EvalInterpreter,
    Interpreter,
    Meta,
    Primitive,
    bind,
    broadcast_shapes,
    current_interpreter,
    current_trace,
    explain_failure,
    fail_dtype,
    fail_shape,
    grad_enabled,
    infer_meta,
    normalize_axis,
    pop_interpreter,
    primitive,
    push_interpreter,
)

__all__ = [
    "EVAL_GRAD", "EVAL_NO_GRAD", "REGISTRY", "EvalInterpreter", "Interpreter", "Meta", "Primitive", "bind",
    "broadcast_shapes", "current_interpreter", "current_trace", "explain_failure", "fail_dtype", "fail_shape",
    "grad_enabled", "infer_meta", "normalize_axis", "pop_interpreter", "primitive", "push_interpreter",
]
