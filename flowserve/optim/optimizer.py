"""``Optimizer``: parameter groups, per-parameter state, and one functional update.

Each optimizer writes its update once, as ``_update(p, g, state, group, lr)`` with
in-place flowserve ops. Eager ``step()`` calls it on parameters and their ``.grad``
(SGD and Adam/AdamW run the same arithmetic as one multi-tensor update on the arrays,
``_foreach_update``, unless ``foreach=False``: see ``flowserve.optim.foreach``);
``nn.Graph`` calls the same method on lazy tensors while tracing, so the update becomes
part of the compiled training graph (state tensors are graph state, ``lr`` an input).
``lr`` is therefore a Python float in eager mode and a 0-d float32 tensor in a graph;
updates are written so that either works. Counters that an update needs (Adam's bias
correction step) are 0-d float32 state tensors updated in place, as PyTorch keeps them.
"""

from __future__ import annotations

import weakref
from abc import ABC, abstractmethod
from collections import OrderedDict

from flowserve import dtypes
from flowserve.autograd.grad_mode import enable_grad, no_grad
from flowserve.errors import DistributedError, FlowserveError
from flowserve.ops import creation
from flowserve.optim import foreach
from flowserve.optim.clip import clip_grads_
from flowserve.tensor import Tensor


class Optimizer(ABC):
    """Base class of the optimizers: ``param_groups``, ``state``, ``step``, ``zero_grad``.

    >>> import flowserve as flow
    >>> w = flow.nn.Parameter(flow.ones(2))
    >>> opt = flow.optim.SGD([w], lr=0.5)
    >>> (w * w).sum().backward()
    >>> opt.step()
    >>> w.tolist()
    [0.0, 0.0]
    """

    defaults: dict

    # state names as nn.Graph shows them (``linear.weight-m``), as OneFlow names them
    GRAPH_STATE_NAMES = {"momentum_buffer": "momentum", "exp_avg": "m", "exp_avg_sq": "v"}
    # state that PyTorch's layout has no key for: kept out of state_dict(), rebuilt on load
    PRIVATE_STATE: tuple = ()

    # ``_foreach_update(params, states, group, lr)``: the eager multi-tensor update, where one exists
    _foreach_update = None
    # whether ``_update`` may run on several parameters concatenated (nn.Graph's fused model
    # update): False for a rule that reads a whole parameter at once, such as a norm
    ELEMENTWISE_UPDATE = True

    def __init__(self, params, defaults: dict):
        self.defaults = dict(defaults)
        self.param_groups: list[dict] = []
        self.state: dict = {}
        self._owned: dict = {}  # arrays the multi-tensor update may write in place (foreach.Writer)
        self._lr_schedulers: list = []  # weak references, in the order the schedulers were made
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of Tensors "
                            f"or dicts, but got {type(params).__name__}")
        params = list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        groups = params if isinstance(params[0], dict) else [{"params": params}]
        for group in groups:
            self.add_param_group(group)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_owned"] = {}  # weak references: a copy owns no array yet
        state["_lr_schedulers"] = []  # nor has it a scheduler
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("_owned", {})
        self.__dict__.setdefault("_lr_schedulers", [])

    def add_lr_scheduler(self, scheduler) -> None:
        """Note a learning-rate scheduler made for this optimizer (its constructor calls this),
        so that ``nn.Graph`` finds it when ``build()`` reads it, attached with
        ``add_optimizer(opt, lr_sch=...)`` or stepped by the user between calls."""
        self._lr_schedulers = [r for r in self._lr_schedulers if r() is not None and r() is not scheduler]
        self._lr_schedulers.append(weakref.ref(scheduler))

    def lr_schedulers(self) -> list:
        """The schedulers made for this optimizer that are still alive, oldest first."""
        alive = [r() for r in self._lr_schedulers]
        return [s for s in alive if s is not None]

    def add_param_group(self, group: dict) -> None:
        """Add a group of parameters with its own options (``{"params": [...], "lr": 0.1}``)."""
        group = dict(group)
        params = group["params"]
        group["params"] = [params] if isinstance(params, Tensor) else list(params)
        for p in group["params"]:
            if not isinstance(p, Tensor) or not p.is_leaf:
                raise ValueError(f"optimizer can only optimize leaf Tensors, got {type(p).__name__}")
            if p.is_global and p.sbp[0].is_partial:
                raise DistributedError(
                    f"{type(self).__name__}: a parameter of size {tuple(p.shape)} is a partial_sum global tensor; "
                    "an update is not linear in its summands: make parameters broadcast (data parallel) or split "
                    "(model parallel), for example p.to_global(sbp=flow.sbp.broadcast)")
        ids = [id(p) for p in group["params"]]
        known = {id(p) for g in self.param_groups for p in g["params"]}
        if len(set(ids)) != len(ids) or known.intersection(ids):
            raise ValueError("some parameters appear in more than one parameter group")
        for key, value in self.defaults.items():
            group.setdefault(key, value)
        if "lr" not in group:
            raise ValueError("parameter group didn't specify a value of required optimization parameter lr")
        self.param_groups.append(group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None if set_to_none or p.grad is None else p.grad * 0

    def state_of(self, p: Tensor, group: dict) -> dict:
        """The state tensors of ``p``, created on first use."""
        state = self.state.get(p)
        if state is None:
            with no_grad():
                state = self._init_state(p, group)
            self.state[p] = state
        return state

    def _init_state(self, p: Tensor, group: dict) -> dict:
        return {}

    def graph_state_suffix(self, key: str) -> str:
        """The name nn.Graph gives a state tensor (``linear.weight-momentum``), as in OneFlow."""
        return self.GRAPH_STATE_NAMES.get(key, key)

    @abstractmethod
    def _update(self, p, g, state: dict, group: dict, lr) -> None:
        """Update parameter ``p`` in place from gradient ``g`` (eager or lazy tensors)."""

    @no_grad()
    def step(self, closure=None):
        """One update of every parameter that has a gradient; returns ``closure()``'s loss."""
        loss = None
        if closure is not None:

            with enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            clip_group_grads(group, [p.grad for p in params])
            states = [self.state_of(p, group) for p in params]
            if params and self._foreach_update is not None and foreach.usable(group, params):
                self._foreach_update(params, states, group, group["lr"])
                continue
            for p, state in zip(params, states):
                self._update(p, p.grad, state, group, group["lr"])
        return loss

    # -- state dict (PyTorch's layout: parameters by index) ------------------------------

    def state_dict(self) -> dict:
        """``{"state": {index: {name: tensor}}, "param_groups": [{..., "params": [index]}]}``."""
        index: dict = {}
        groups = []
        for group in self.param_groups:
            ids = [index.setdefault(id(p), len(index)) for p in group["params"]]
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": ids})
        state = OrderedDict()
        for group in self.param_groups:
            for p in group["params"]:
                own = self.state.get(p)
                if own:
                    state[index[id(p)]] = {k: v.detach().clone() for k, v in own.items()
                                           if k not in self.PRIVATE_STATE}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a ``state_dict()`` (this optimizer's or PyTorch's, tensors converted)."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise FlowserveError(f"{type(self).__name__}.load_state_dict expected {len(self.param_groups)} "
                                 f"parameter groups, got {len(groups)}")
        for i, (mine, theirs) in enumerate(zip(self.param_groups, groups)):
            if len(mine["params"]) != len(theirs["params"]):
                raise FlowserveError(f"{type(self).__name__}.load_state_dict: parameter group {i} has "
                                     f"{len(mine['params'])} parameters, the loaded one {len(theirs['params'])}")
        params = {}
        for mine, theirs in zip(self.param_groups, groups):
            params.update(zip(theirs["params"], [(p, mine) for p in mine["params"]]))
            mine.update({k: v for k, v in theirs.items() if k != "params"})
        for key, values in state_dict["state"].items():
            p, group = params[int(key)]
            self._load_param_state(p, group, values)

    def _load_param_state(self, p: Tensor, group: dict, values: dict) -> None:
        own = self.state_of(p, group)
        for name, value in values.items():
            if value is None:
                continue
            value = value if isinstance(value, Tensor) else Tensor(value)
            if name in own and tuple(own[name].shape) != tuple(value.shape):
                raise FlowserveError(f"{type(self).__name__}.load_state_dict: state '{name}' expected size "
                                     f"{tuple(own[name].shape)}, got {tuple(value.shape)}")
            if name in own:  # keep the tensor object: nn.Graph holds it as graph state
                own[name].data = value.detach().to(own[name].dtype).to(p.device).clone()
            else:
                own[name] = value.detach().to(p.device).clone()
        self._after_load_state(own, values)

    def _after_load_state(self, state: dict, loaded: dict) -> None:
        """Rebuild ``PRIVATE_STATE`` from what was loaded."""

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines += [f"    {k}: {v}" for k, v in sorted(group.items()) if k != "params"]
        return "\n".join(lines + [")"])


def clip_group_grads(group: dict, grads: list) -> None:
    """OneFlow's per-group clipping: a group with ``clip_grad_max_norm`` (and optionally
    ``clip_grad_norm_type``, default 2) has its gradients clipped to that joint norm before
    its update, in eager ``step()`` and in a compiled nn.Graph alike."""
    max_norm = group.get("clip_grad_max_norm")
    if max_norm is None or not grads:
        return
    clip_grads_(grads, float(max_norm), float(group.get("clip_grad_norm_type", 2.0)))


def step_tensor(p):
    """A parameter's step counter: a 0-d float32 tensor, as PyTorch keeps it."""
    return creation.zeros((), dtype=dtypes.float32, device=p.device)


def begin_update(g, state: dict, group: dict):
    """What every update starts with: the gradient negated under ``maximize`` and the
    step counter advanced. Returns ``(g, step)``."""
    if group["maximize"]:
        g = -g
    step = state["step"]
    step.copy_(step + 1)
    return g, step


def lerp(start, end, weight: float):
    """``start + weight * (end - start)``, rounded as PyTorch's ``lerp`` kernel."""
    if weight < 0.5:
        return start + (end - start) * weight
    return end - (end - start) * (1 - weight)


def addcmul(base, t1, t2, value: float = 1.0):
    """``base + value * t1 * t2`` (PyTorch's ``addcmul`` order of operations)."""
    return base + (t1 * value if value != 1 else t1) * t2


def addcdiv(base, t1, t2, value=1.0):
    """``base + value * t1 / t2`` (PyTorch's ``addcdiv`` order); ``value`` may be a tensor."""
    return base + (t1 * value) / t2


def check_options(name: str, lr=None, eps=None, weight_decay=None, momentum=None) -> None:
    """PyTorch's argument checks and messages (``Invalid learning rate: -1``)."""
    for label, value in (("learning rate", lr), ("epsilon value", eps),
                         ("weight_decay value", weight_decay), ("momentum value", momentum)):
        if value is not None and not isinstance(value, Tensor) and value < 0:
            raise ValueError(f"{name}: Invalid {label}: {value}")


def check_betas(name: str, betas) -> None:
    """PyTorch's check and message for ``betas`` (``Invalid beta parameter at index 1``)."""
    for i, beta in enumerate(betas):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"{name}: Invalid beta parameter at index {i}: {beta}")
