"""``flow.compile(model)``: PyTorch 2's ``torch.compile`` spelling, backed by ``nn.Graph``.

``compiled = flow.compile(model)`` is a module that shares ``model``'s parameters and buffers
(``compiled._orig_mod is model``, state dict keys prefixed ``_orig_mod.`` as PyTorch's) and
runs its forward through a compiled ``nn.Graph``, one per input signature (up to
``cache_size``; a new batch size reuses the graph where it is batch-polymorphic):

- inference (``model.eval()`` or under ``flow.no_grad()``): the compiled forward;
- training with ``optimizer=`` given: each call is one compiled step — forward, the loss's
  backward and the optimizer's update — and returns the model's output. The loss is
  ``loss_fn(output, target)`` when ``loss_fn`` is given (call ``compiled(*inputs, target)``),
  else the model's own output: a scalar, the ``"loss"`` entry of a dict, or the last
  element of a tuple that is a scalar (nanoGPT's ``logits, loss = model(x, y)``);
- training without an optimizer (``loss.backward()`` outside): eager, since gradients must
  reach the caller's tape; a warning says so once.

If ``build`` cannot be traced (data-dependent Python control flow, an op without a graph
form), the module runs eagerly from then on and a one-line warning names the op.

>>> import flowserve as flow
>>> model = flow.nn.Linear(4, 2).eval()
>>> fast = flow.compile(model)
>>> tuple(fast(flow.randn(3, 4)).shape)
(3, 2)
"""

from __future__ import annotations

import warnings

from flowserve.autograd.grad_mode import is_grad_enabled
from flowserve.nn.graph.graph import Graph
from flowserve.nn.graph.signature import SignatureCache
from flowserve.nn.module import Module
from flowserve.tensor import Tensor


class _ForwardGraph(Graph):
    def __init__(self, model, optimizer=None, loss_fn=None, cache_size: int = 8):
        super().__init__()
        self.model = model
        if isinstance(loss_fn, Module):
            self.loss_fn = loss_fn  # registered, so the graph knows it
        object.__setattr__(self, "_loss_fn", loss_fn)
        if optimizer is not None:
            self.add_optimizer(optimizer)
        object.__setattr__(self, "_cache", SignatureCache(cache_size))

    def build(self, *args, **kwargs):
        if self._loss_fn is not None:
            *inputs, target = args
            out = self.model(*inputs, **kwargs)
            loss = self._loss_fn(out, target)
        else:
            out = self.model(*args, **kwargs)
            loss = loss_of(out) if self.training else None
        if loss is not None:
            loss.backward()
        return out


def loss_of(out):
    """The loss inside a model's output: a scalar, ``out["loss"]``, or a tuple's last scalar."""
    if isinstance(out, Tensor) and out.numel() == 1:
        return out
    if isinstance(out, dict) and isinstance(out.get("loss"), Tensor):
        return out["loss"]
    if isinstance(out, (tuple, list)) and out and isinstance(out[-1], Tensor) and out[-1].numel() == 1:
        return out[-1]
    raise TypeError("flow.compile(model, optimizer=...) trains on the model's loss: return a scalar loss, "
                    "a dict with 'loss', or a tuple ending in the loss, or pass loss_fn=")


class CompiledModule(Module):
    """What ``flow.compile`` returns: ``model`` behind compiled graphs (see the module docs)."""

    def __init__(self, model: Module, optimizer=None, loss_fn=None, cache_size: int = 8):
        super().__init__()
        self._orig_mod = model
        object.__setattr__(self, "_graphs", {})
        object.__setattr__(self, "_options", (optimizer, loss_fn, cache_size))
        object.__setattr__(self, "_eager_reason", None)

    def _graph(self, training: bool) -> Graph:
        graph = self._graphs.get(training)
        if graph is None:
            optimizer, loss_fn, cache_size = self._options
            graph = _ForwardGraph(self._orig_mod, optimizer if training else None,
                                  loss_fn if training else None, cache_size)
            self._graphs[training] = graph
        return graph

    def forward(self, *args, **kwargs):
        optimizer, loss_fn, _ = self._options
        training = self._orig_mod.training and is_grad_enabled()
        if self._eager_reason is not None or (training and optimizer is None):
            if training and optimizer is None and self._eager_reason is None:
                self._fall_back("training without optimizer= runs eagerly so that loss.backward() "
                                "reaches the parameters; pass optimizer= to compile the whole step")
            return self._eager(args, kwargs, training)
        try:
            return self._graph(training)(*args, **kwargs)
        except Exception as exc:  # the trace failed: say which op, then run eagerly from now on
            self._fall_back(f"could not be traced ({_first_line(exc)})")
            return self._eager(args, kwargs, training)

    def _eager(self, args, kwargs, training: bool):
        optimizer, loss_fn, _ = self._options
        if not training or optimizer is None:
            return self._orig_mod(*args, **kwargs)
        if loss_fn is not None:
            *inputs, target = args
            out = self._orig_mod(*inputs, **kwargs)
            loss = loss_fn(out, target)
        else:
            out = self._orig_mod(*args, **kwargs)
            loss = loss_of(out)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return out

    def _fall_back(self, why: str) -> None:
        object.__setattr__(self, "_eager_reason", why)
        warnings.warn(f"flow.compile: {type(self._orig_mod).__name__} runs eagerly: {why}", UserWarning,
                      stacklevel=3)


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def compile(model=None, *, optimizer=None, loss_fn=None, cache_size: int = 8, fullgraph: bool = False,  # noqa: A001
            dynamic=None, backend=None, mode=None, options=None, disable: bool = False):
    """``torch.compile``'s spelling: a module that runs ``model`` through ``nn.Graph``.
    ``fullgraph``, ``dynamic``, ``backend``, ``mode`` and ``options`` are accepted for
    PyTorch compatibility (flowserve has one backend: ONNX Runtime through ``nn.Graph``);
    ``disable=True`` returns ``model`` itself. Used as a decorator, ``@flow.compile``."""
    if model is None:
        return lambda m: compile(m, optimizer=optimizer, loss_fn=loss_fn, cache_size=cache_size, disable=disable)
    if disable:
        return model
    if not isinstance(model, Module):
        raise TypeError(f"flow.compile expects an nn.Module, got {type(model).__name__}; compile functions by "
                        "wrapping them in a Module's forward")
    return CompiledModule(model, optimizer, loss_fn, cache_size)
