"""Collective primitives: what a graph records where the ranks of a distributed run meet.

Their kernels call the process's communicator (``flow.env``), so eager code (SyncBatchNorm)
and traced graphs (gradient reduction, ZeRO) share one declaration; an ``nn.Graph`` with
collectives runs in segments between them (``flowserve.distributed.segments``). In a world
of one process each of them returns its input, which is what their ONNX lowering says:
an ONNX model is one process.

- ``all_reduce(x)``: the sum of ``x`` over the ranks; its gradient is the sum of the
  ranks' cotangents (every rank's loss depends on every rank's input);
- ``reduce_scatter(x)``: this rank's slice of the sum of a 1-d ``x`` (ZeRO's gradients);
- ``all_gather(x)``: the ranks' 1-d slices joined in rank order (ZeRO's parameters).

The communicators exchange host (numpy) arrays: on a GPU the kernels copy the operand to
the host and the result back to the operand's device.
"""

from __future__ import annotations

import numpy as np

from flowserve import env
from flowserve.ops.registry import Meta, fail_shape, primitive

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather")


def _on_host(xp, x, copy: bool) -> np.ndarray:
    """``x`` as a C-contiguous numpy array (a GPU array is always copied; ``copy`` gives
    a CPU one a copy the communicator may reduce into)."""
    if xp is not np:
        return xp.asnumpy(x, order="C")
    return np.array(x, copy=True, order="C") if copy else np.asarray(x, order="C")


@primitive("all_reduce", shape=lambda x: x, vjp=lambda ctx, g: (all_reduce(g),))
def all_reduce(xp, x):
    return xp.asarray(env.communicator().allreduce(_on_host(xp, x, copy=True)))


def _sharded_meta(x: Meta) -> Meta:
    world = env.get_world_size()
    if x.ndim != 1 or (x.shape[0] >= 0 and x.shape[0] % world):
        fail_shape("reduce_scatter", f"a 1-d input whose size divides by the world size {world}", tuple(x.shape))
    return Meta((x.shape[0] // world,), x.dtype)


def _gathered_meta(x: Meta) -> Meta:
    if x.ndim != 1:
        fail_shape("all_gather", "a 1-d input", tuple(x.shape))
    return Meta((x.shape[0] * env.get_world_size(),), x.dtype)


@primitive("reduce_scatter", shape=_sharded_meta, differentiable=False)
def reduce_scatter(xp, x):
    return xp.asarray(env.communicator().reduce_scatter(_on_host(xp, x, copy=True)))


@primitive("all_gather", shape=_gathered_meta, differentiable=False)
def all_gather(xp, x):
    return xp.asarray(env.communicator().all_gather(_on_host(xp, x, copy=False)))
