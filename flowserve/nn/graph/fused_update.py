"""Fused model update (``config.allow_fuse_model_update_ops(True)``): one update for all
parameters of a group instead of one per parameter.

Not an IR pass: it is how the optimizer part of a training graph (``update.py``) is traced
when the option is on. The optimizer's own functional update runs once on the flat lazy
tensors, so the IR is traced fused; a pass over the traced IR would have to find each
parameter's update among the step's other elementwise ops again, which the trace knows.

Parameters, gradients and same-shaped optimizer states of a parameter group are
flattened and concatenated, the optimizer's elementwise update runs once on the flat
buffers, and each parameter and state takes back its slice. A training step of a network
with many small parameters then runs a handful of large kernels instead of a dozen tiny
ones per parameter. Shared scalar states (Adam's step counter) advance together.

>>> update_group(opt, group, lr, [(p, lazy_p, g), ...], [state, ...], fuse=True)   # doctest: +SKIP
"""

from __future__ import annotations

from flowserve.ops import functional as ops_functional

FUSE_MAX_NUMEL = 1 << 16  # larger parameters update alone: concatenating them costs more than it saves


def _flat(tensors: list):
    return ops_functional.cat([ops_functional.reshape(t, (-1,)) for t in tensors], 0)


def _scatter_back(flat, targets: list) -> None:
    offset = 0
    for t in targets:
        n = t.numel()
        t.copy_(ops_functional.reshape(ops_functional.slice_axis(flat, 0, offset, offset + n), tuple(t.shape)))
        offset += n


def fused_update(opt, group: dict, lr, items: list, states: list[dict]) -> None:
    """Run ``opt._update`` once on the concatenation of ``items`` (``(param, grad)`` lazy
    pairs) and their ``states``; write every slice back in place."""
    params = [p for p, _ in items]
    flat_p = _flat(params)
    flat_g = _flat([g for _, g in items])
    flat_state, scatter, flattened = {}, {}, set()
    for key in states[0] if states else ():
        tensors = [s[key] for s in states]
        if all(tuple(t.shape) == tuple(p.shape) for t, p in zip(tensors, params)):
            flat_state[key] = _flat(tensors)
            scatter[key] = tensors
            flattened.add(key)
        else:  # a scalar counter shared by the group: advance the first, copy to all
            flat_state[key] = tensors[0]
            scatter[key] = tensors[1:]
    opt._update(flat_p, flat_g, flat_state, group, lr)
    _scatter_back(flat_p, params)
    for key, targets in scatter.items():
        if key in flattened:
            _scatter_back(flat_state[key], targets)
        else:
            for t in targets:
                t.copy_(flat_state[key])


def update_group(opt, group: dict, lr, items: list, states: list, fuse: bool) -> None:
    """Update a group's parameters (``items``: ``(param, lazy param, gradient)``, ``states``
    their optimizer states); with ``fuse`` and an optimizer whose update is elementwise
    (``Optimizer.ELEMENTWISE_UPDATE``; not LAMB's), the small ones in one flat update."""
    fuse = fuse and opt.ELEMENTWISE_UPDATE
    small = [i for i, (p, _, _) in enumerate(items) if fuse and p.numel() <= FUSE_MAX_NUMEL]
    if len(small) > 1:
        fused_update(opt, group, lr, [(items[i][1], items[i][2]) for i in small], [states[i] for i in small])
    for i, ((_, lazy_p, g), state) in enumerate(zip(items, states)):
        if len(small) <= 1 or i not in small:
            opt._update(lazy_p, g, state, group, lr)
