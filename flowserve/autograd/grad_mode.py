"""``no_grad``, ``enable_grad``, ``set_grad_enabled``: context managers and decorators."""

from __future__ import annotations

import functools

from flowserve.ops.registry import STATE


def is_grad_enabled() -> bool:
    return STATE.grad_enabled


class set_grad_enabled:
    """Turn gradient recording on or off inside a ``with`` block or a decorated function."""

    def __init__(self, mode: bool = True):
        self.mode = bool(mode)
        self.prev = STATE.grad_enabled
        STATE.grad_enabled = self.mode  # also works as a plain call, as in PyTorch

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        STATE.grad_enabled = self.prev
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__.__new__(self.__class__) as ctx:
                ctx.prev, STATE.grad_enabled = STATE.grad_enabled, self.mode
                try:
                    return fn(*args, **kwargs)
                finally:
                    STATE.grad_enabled = ctx.prev

        STATE.grad_enabled = self.prev
        return wrapper


class no_grad(set_grad_enabled):
    """``with flow.no_grad():`` records no gradients."""

    def __init__(self):
        super().__init__(False)


class enable_grad(set_grad_enabled):
    def __init__(self):
        super().__init__(True)


class inference_mode(no_grad):
    def __init__(self, mode: bool = True):
        set_grad_enabled.__init__(self, not mode)
