"""``Optimizer``: parameter groups, per-parameter state, and one functional update.

Each optimizer writes its update once, as ``_update(p, g, state, group, lr)`` with
in-place flowserve ops. Eager ``step()`` calls it on parameters and their ``.grad``;
``nn.Graph`` calls the same method on lazy tensors while tracing, so the update becomes
part of the compiled training graph (state tensors are graph state, ``lr`` an input).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import OrderedDict

from flowserve.autograd.grad_mode import no_grad
from flowserve.errors import FlowserveError
from flowserve.tensor import Tensor


class Optimizer(ABC):
    defaults: dict

    def __init__(self, params, defaults: dict):
        self.defaults = dict(defaults)
        self.param_groups: list[dict] = []
        self.state: dict = {}
        params = list(params)
        if not params:
            raise ValueError("optimizer got an empty parameter list")
        groups = params if isinstance(params[0], dict) else [{"params": params}]
        for group in groups:
            self.add_param_group(group)

    def add_param_group(self, group: dict) -> None:
        group = dict(group)
        params = group["params"]
        group["params"] = [params] if isinstance(params, Tensor) else list(params)
        for p in group["params"]:
            if not isinstance(p, Tensor) or not p.is_leaf:
                raise ValueError("optimizer can only optimize leaf Tensors")
        for key, value in self.defaults.items():
            group.setdefault(key, value)
        group.setdefault("initial_lr", group["lr"])
        self.param_groups.append(group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                p.grad = None if set_to_none or p.grad is None else p.grad * 0

    def state_of(self, p: Tensor, group: dict) -> dict:
        """The state tensors of ``p``, created (zeros) on first use."""
        state = self.state.get(p)
        if state is None:
            with no_grad():
                state = self._init_state(p, group)
            self.state[p] = state
        return state

    def _init_state(self, p: Tensor, group: dict) -> dict:
        return {}

    GRAPH_STATE_NAMES = {"momentum_buffer": "momentum", "exp_avg": "m", "exp_avg_sq": "v"}

    def graph_state_suffix(self, key: str) -> str:
        """The name nn.Graph gives a state tensor (``linear.weight-momentum``), as in OneFlow."""
        return self.GRAPH_STATE_NAMES.get(key, key)

    @abstractmethod
    def _update(self, p, g, state: dict, group: dict, lr) -> None:
        """Update parameter ``p`` in place from gradient ``g`` (eager or lazy tensors)."""

    @no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self._update(p, p.grad, self.state_of(p, group), group, group["lr"])
        return loss

    # -- state dict (PyTorch's layout: params by index) ----------------------------------

    def state_dict(self) -> dict:
        index = {}
        groups = []
        for group in self.param_groups:
            ids = []
            for p in group["params"]:
                index.setdefault(id(p), len(index))
                ids.append(index[id(p)])
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": ids})
        by_id = {id(p): p for g in self.param_groups for p in g["params"]}
        state = OrderedDict((index[i], {k: v.detach().clone() for k, v in self.state[by_id[i]].items()})
                            for i in index if by_id[i] in self.state)
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise FlowserveError(f"loaded state dict has {len(groups)} parameter groups, "
                                 f"the optimizer has {len(self.param_groups)}")
        params = [p for g in self.param_groups for p in g["params"]]
        for mine, theirs in zip(self.param_groups, groups):
            if len(mine["params"]) != len(theirs["params"]):
                raise FlowserveError("loaded state dict contains a parameter group that doesn't match "
                                     "the size of optimizer's group")
            mine.update({k: v for k, v in theirs.items() if k != "params"})
        for key, values in state_dict["state"].items():
            p = params[int(key)]
            own = self.state_of(p, self._group_of(p))
            for name, value in values.items():
                if name in own:
                    own[name].data = value.detach().to(own[name].dtype).clone()
                else:
                    own[name] = value.detach().clone()

    def _group_of(self, p: Tensor) -> dict:
        for group in self.param_groups:
            if any(q is p for q in group["params"]):
                return group
        raise KeyError("parameter is not in this optimizer")

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines += [f"    {k}: {v}" for k, v in sorted(group.items()) if k != "params"]
        return "\n".join(lines + [")"])
