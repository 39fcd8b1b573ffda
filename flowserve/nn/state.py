"""Loading a state dict into a module, with PyTorch's strict-key reporting."""

from __future__ import annotations

from collections import namedtuple

from flowserve.errors import FlowserveError
from flowserve.ops.creation import tensor
from flowserve.tensor import Tensor

IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


def load_module_state(module, state_dict, strict: bool = True) -> IncompatibleKeys:
    own = module.state_dict(keep_vars=True)
    missing = [k for k in own if k not in state_dict]
    unexpected = [k for k in state_dict if k not in own]
    errors = []
    if strict and (missing or unexpected):
        if unexpected:
            errors.append("Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected) + ".")
        if missing:
            errors.append("Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + ".")
    for key, target in own.items():
        if key not in state_dict:
            continue
        value = state_dict[key]
        shape = tuple(getattr(value, "shape", ()))
        if shape != tuple(target.shape):
            errors.append(f"size mismatch for {key}: copying a param with shape {shape} from checkpoint, "
                          f"the shape in current model is {tuple(target.shape)}.")
            continue
        _copy_into(target, value)
    if errors:
        raise FlowserveError(f"Error(s) in loading state_dict for {type(module).__name__}:\n\t" + "\n\t".join(errors))
    return IncompatibleKeys(missing, unexpected)


def _copy_into(target, value) -> None:
    if not isinstance(value, Tensor):
        value = tensor(value)
    target.data = value.detach().to(target.device, target.dtype).clone()
