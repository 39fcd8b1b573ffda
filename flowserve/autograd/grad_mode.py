"""``no_grad``, ``enable_grad``, ``inference_mode``, ``set_grad_enabled``.

Each is a context manager (and a decorator) over the current interpreter, a context
variable: grad mode is per thread and per asyncio task, as in PyTorch, and a new thread
starts with gradients on.
"""

from __future__ import annotations

import functools

from flowserve.dispatch import current_interpreter, grad_enabled, pop_interpreter, push_interpreter


def is_grad_enabled() -> bool:
    return grad_enabled()


class _GradMode:
    """Sets grad mode to ``mode`` inside a ``with`` block or a decorated function."""

    def __init__(self, mode: bool):
        self.mode = bool(mode)
        self._tokens: list = []

    def __enter__(self):
        self._tokens.append(push_interpreter(current_interpreter().with_grad(self.mode)))
        return self

    def __exit__(self, *exc) -> bool:
        pop_interpreter(self._tokens.pop())
        return False

    def __call__(self, fn):
        mode = self.mode

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with _GradMode(mode):
                return fn(*args, **kwargs)

        return wrapper


class no_grad(_GradMode):
    """``with flow.no_grad():`` records no gradients (in this thread or task only).

    >>> import flowserve as flow
    >>> x = flow.ones(2, requires_grad=True)
    >>> with flow.no_grad():
    ...     (x * 2).requires_grad
    False
    """

    def __init__(self):
        super().__init__(False)


class enable_grad(_GradMode):
    """``with flow.enable_grad():`` records gradients again inside a ``no_grad`` block."""

    def __init__(self):
        super().__init__(True)


class inference_mode(_GradMode):
    """``with flow.inference_mode():`` as ``no_grad``; ``inference_mode(False)`` changes nothing."""

    def __init__(self, mode: bool = True):
        super().__init__(not mode)


class set_grad_enabled(_GradMode):
    """``flow.set_grad_enabled(False)`` switches grad mode at once (for the rest of this
    thread or task); as a ``with`` block or decorator it restores the previous mode after."""

    def __init__(self, mode: bool = True):
        super().__init__(mode)
        self._tokens.append(push_interpreter(current_interpreter().with_grad(self.mode)))

    def __enter__(self):
        return self

    def __call__(self, fn):
        pop_interpreter(self._tokens.pop())  # as a decorator, the mode applies inside fn only
        return super().__call__(fn)
