"""``nn.Graph.state_dict()`` / ``load_state_dict()``: the whole state of a training graph.

Module states sit under the modules' attribute names (``{"model": {"0.weight": ...}}``);
the other states are named as OneFlow names them: optimizer states per parameter
(``model.0.weight-momentum``, Adam's ``-m`` / ``-v``), ``System-Train-TrainStep``, and the
grad scaler's ``System-Train-LossScale``. The graph writes its results back into the
eager tensors after every call, so these are always the current values.
"""

from __future__ import annotations

from collections import OrderedDict

from flowserve.errors import GraphError
from flowserve.nn.graph.trace import LOSS_SCALE, TRAIN_STEP
from flowserve.tensor import Tensor


def _param_names(graph) -> dict:
    names = {}
    for attr, module in graph.original_modules().items():
        for name, p in module.named_parameters(prefix=attr):
            names.setdefault(id(p), name)
    return names


def additional_state(graph, create: bool = False) -> "OrderedDict[str, Tensor]":
    """The graph's non-module states by name; ``create`` makes missing optimizer states."""
    out: OrderedDict = OrderedDict()
    names = _param_names(graph)
    for opt, _sched in graph.parts.optimizers:
        for group in opt.param_groups:
            for p in group["params"]:
                if id(p) not in names:
                    continue
                state = opt.state_of(p, group) if create else opt.state.get(p, {})
                for key, tensor in state.items():
                    out[f"{names[id(p)]}-{opt.graph_state_suffix(key)}"] = tensor
    if graph.training:
        out[TRAIN_STEP] = graph.parts.train_step
    scaler = graph.parts.grad_scaler
    if scaler is not None:
        for key, tensor in scaler.graph_state().items():
            out[LOSS_SCALE if key == "scale" else f"{LOSS_SCALE}-{key}"] = tensor
    return out


def graph_state_dict(graph, destination=None) -> OrderedDict:
    destination = OrderedDict() if destination is None else destination
    for attr, module in graph.original_modules().items():
        destination[attr] = module.state_dict()
    parallel = graph.parts.parallel  # ZeRO: the optimizer states are gathered from every rank's shard
    if parallel is not None:
        parallel.gather_state()
    for name, tensor in additional_state(graph).items():
        destination[name] = tensor.detach().clone()
    if parallel is not None:
        parallel.release_state()
    return destination


def load_graph_state_dict(graph, state_dict, strict: bool = True) -> None:
    if graph.is_compiled:
        raise GraphError("nn.Graph's state dict can only be loaded before the first call of a graph.")
    modules = graph.original_modules()
    own = additional_state(graph, create=True)
    unexpected = []
    for name, item in state_dict.items():
        if name in modules:
            modules[name].load_state_dict(item, strict)
        elif name in own:
            _copy(own[name], item, name)
        else:
            unexpected.append(name)
    missing = [n for n in list(modules) + list(own) if n not in state_dict]
    if strict and (unexpected or missing):
        parts = []
        if unexpected:
            parts.append("Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected) + ".")
        if missing:
            parts.append("Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + ".")
        raise GraphError(f"Error(s) in loading state_dict for nn.Graph {graph.name}:\n\t" + "\n\t".join(parts))


def _copy(target: Tensor, value, name: str) -> None:
    if not isinstance(value, Tensor):
        raise GraphError(f"state {name!r} of a graph state dict must be a Tensor, got {type(value).__name__}")
    if tuple(value.shape) != tuple(target.shape):
        raise GraphError(f"size mismatch for {name}: copying a tensor with shape {tuple(value.shape)} from "
                         f"checkpoint, the shape in current graph is {tuple(target.shape)}.")
    target.data = value.detach().to(target.dtype).clone()
