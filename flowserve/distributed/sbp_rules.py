"""SBP inference: for a primitive called on global tensors, the sbp of its results and the
local call that computes this rank's piece of them (OneFlow's SBP signatures).

``plan(call)`` returns ``(local inputs, local attrs, output sbp)``; the primitive then runs
on the local pieces, so its kernel, shape rule and gradient are the local ones. The rules:

- elementwise: equal splits stay split (a broadcast operand is sliced to the piece), all
  broadcast stay broadcast; ``partial_sum`` survives what is linear in it: ``P + P``,
  ``P - P``, ``P * B``, ``P / B``, ``-P``, casts to float; in ``P * P`` and ``x / P`` the
  second factor and the divisor, in ``P + B`` and ``P + 1`` the partial_sum addends, are
  all-reduced to broadcast first;
- ``matmul``: ``split(row) x broadcast -> split(row)``, ``broadcast x split(col) ->
  split(col)``, ``split(k) x split(k)`` over the contracted dim ``-> partial_sum``,
  ``P x B`` and ``B x P -> partial_sum``;
- ``sum`` over a split dim ``-> partial_sum`` (``mean`` divides by the logical size), over
  other dims the split moves with its dim; ``amax``/``amin``/``argmax``/softmax keep a split
  on a dim they do not reduce;
- ``reshape``/``permute``/``expand``/``concat``/``one_hot`` keep a split whose dim they keep
  (so ``cross_entropy`` of split logits and labels is a ``partial_sum``);
- convolutions and pooling keep a batch split (``split(0)`` input, broadcast weights);
- random draws keep a split (each rank draws its piece);
- anything else on broadcast inputs is computed on every rank (broadcast).

Any other combination is refused with an error that names the op and the sbps and suggests
``x.to_global(sbp=flow.sbp.broadcast)``.
"""

from __future__ import annotations

import math
import types
from dataclasses import dataclass

from flowserve import dtypes, env
from flowserve.distributed import sbp as sbp_types
from flowserve.errors import DistributedError
from flowserve.ops import functional as ops_functional
from flowserve.ops.collective import all_reduce

ADDITIVE = ("add", "sub")
OTHER_BINARY = ("pow", "maximum", "minimum", "fmod", "eq", "ne", "lt", "le", "gt", "ge", "where",
                "bitwise_and", "bitwise_or", "bitwise_xor")
LINEAR_UNARY = ("neg", "copy", "to_device")
UNARY = ("exp", "log", "sqrt", "tanh", "sigmoid", "relu", "abs", "sign", "sin", "cos", "erf", "expm1", "log1p",
         "floor", "ceil", "round", "bitwise_not")
BATCH_PARALLEL = ("conv", "conv_transpose", "max_pool2d", "max_pool2d_indices")
RANDOM = ("uniform_like", "normal_like", "dropout_mask", "uniform_seeded")


def piece(full, dim: int, shape, rank: int | None = None, world: int | None = None):
    """This rank's piece along ``dim`` of a tensor holding the whole logical ``shape``."""
    world = env.get_world_size() if world is None else world
    rank = env.get_rank() if rank is None else rank
    sizes = sbp_types.split_sizes(shape[dim], world)
    return ops_functional.narrow(full, dim, sum(sizes[:rank]), sizes[rank])


@dataclass
class Call:
    """A primitive call with global inputs: ``sbps[i]`` is None for a local 0-d operand."""

    name: str
    locals: list
    attrs: dict
    sbps: list
    shapes: list  # logical shapes of the inputs
    out_shape: tuple  # logical shape of the first output

    def refuse(self, why: str = ""):
        given = ", ".join(repr(s) if s is not None else "a local scalar" for s in self.sbps)
        raise DistributedError(
            f"{self.name} on global tensors: the sbp combination ({given}) is not supported{why}; convert the "
            "inputs first, for example x.to_global(sbp=flow.sbp.broadcast)")

    def globals_(self) -> list:
        return [s for s in self.sbps if s is not None]


def _elementwise(kind: str):
    def rule(call: Call):
        if kind in ("product", "numerator"):
            _reduce_factors(call, kind)
        elif kind == "additive":
            _reduce_addends(call)
        n_out = len(call.out_shape)
        splits, partial = set(), []
        for i, (s, shape) in enumerate(zip(call.sbps, call.shapes)):
            if s is None:
                continue
            if s.is_split:
                d = s.dim + n_out - len(shape)
                if shape[s.dim] != call.out_shape[d]:
                    call.refuse(" (a split dim that is broadcast against the other operands)")
                splits.add(d)
            elif s.is_partial:
                partial.append(i)
        if partial:
            if splits or not _linear_in_partial(kind, call, partial):
                call.refuse(" (partial_sum survives only ops linear in it: P+P, P-P, P*B, P/B, -P)")
            return call.locals, call.attrs, sbp_types.partial_sum
        if len(splits) > 1:
            call.refuse(" (operands split along different dims)")
        if not splits:
            return call.locals, call.attrs, sbp_types.broadcast
        d = splits.pop()
        return _slice_broadcasts(call, d, n_out), call.attrs, sbp_types.split(d)

    return rule


def _reduce_factors(call: Call, kind: str) -> None:
    """``P * P``, ``x / P``: a product is linear in one factor only, so every partial_sum
    factor but the first (every divisor) is all-reduced to broadcast first (OneFlow's boxing)."""
    partial = [i for i, s in enumerate(call.sbps) if s is not None and s.is_partial]
    keep = partial[:1] if kind == "product" else [i for i in partial if i == 0]
    for i in partial:
        if i not in keep:
            call.locals[i], call.sbps[i] = all_reduce(call.locals[i]), sbp_types.broadcast


def _reduce_addends(call: Call) -> None:
    """``P + B``, ``P + 1.0``: a sum is linear only in all its addends together, so with a
    broadcast addend or a number the partial_sum ones are all-reduced to broadcast first
    (``x @ w + bias`` of a row-split ``w``: Megatron's all-reduce before the bias)."""
    partial = [i for i, s in enumerate(call.sbps) if s is not None and s.is_partial]
    if partial and all(s is None or s.is_partial or s.is_broadcast for s in call.sbps) and \
            len(partial) < len(call.sbps):
        for i in partial:
            call.locals[i], call.sbps[i] = all_reduce(call.locals[i]), sbp_types.broadcast


def _linear_in_partial(kind: str, call: Call, partial: list) -> bool:
    others = [s for i, s in enumerate(call.sbps) if i not in partial]
    replicated = all(s is None or s.is_broadcast for s in others)
    if kind == "additive":
        return all(s is not None and s.is_partial for s in call.sbps)
    if kind == "product":
        return len(partial) == 1 and replicated
    if kind == "numerator":
        return partial == [0] and replicated
    if kind == "linear":
        return call.name != "cast" or dtypes.from_name(call.attrs["dtype"]).is_floating_point
    return False


def _slice_broadcasts(call: Call, d: int, n_out: int) -> list:
    """The operands for an output split along ``d``: broadcast ones cut to this rank's piece."""
    out = []
    for t, s, shape in zip(call.locals, call.sbps, call.shapes):
        aligned = d - (n_out - len(shape))
        if s is not None and s.is_broadcast and aligned >= 0 and shape[aligned] == call.out_shape[d] != 1:
            t = piece(t, aligned, shape)
        out.append(t)
    return out


def _matmul(call: Call):
    a, b = call.sbps
    na, nb = len(call.shapes[0]), len(call.shapes[1])
    no = len(call.out_shape)
    if None in (a, b):
        call.refuse()
    if a.is_broadcast and b.is_broadcast:
        return call.locals, call.attrs, sbp_types.broadcast
    if (a.is_partial and b.is_broadcast) or (a.is_broadcast and b.is_partial):
        return call.locals, call.attrs, sbp_types.partial_sum
    if min(na, nb) >= 2:
        if a.is_split and b.is_broadcast and a.dim == na - 2:
            return call.locals, call.attrs, sbp_types.split(no - 2)
        if a.is_split and b.is_broadcast and a.dim < na - 2 and nb == 2:
            return call.locals, call.attrs, sbp_types.split(a.dim + no - na)
        if a.is_broadcast and b.is_split and b.dim == nb - 1:
            return call.locals, call.attrs, sbp_types.split(no - 1)
        if a.is_split and b.is_split and a.dim == na - 1 and b.dim == nb - 2:
            return call.locals, call.attrs, sbp_types.partial_sum
    call.refuse(" (matmul takes split(row) x broadcast, broadcast x split(col), split(k) x split(k) over the "
                "contracted dim, or partial_sum x broadcast)")


def _reduce(call: Call):
    s = call.sbps[0]
    axes, keep = call.attrs["axes"], call.attrs["keepdims"]
    if s.is_broadcast:
        return call.locals, call.attrs, sbp_types.broadcast
    if s.is_partial:
        if call.name != "sum":
            call.refuse()
        return call.locals, call.attrs, sbp_types.partial_sum
    if s.dim in axes:
        if call.name != "sum":
            call.refuse(" (a reduction over the split dim)")
        return call.locals, call.attrs, sbp_types.partial_sum
    return call.locals, call.attrs, sbp_types.split(s.dim if keep else s.dim - sum(a < s.dim for a in axes))


def _along_axis(call: Call):
    """softmax, log_softmax, argmax, argmin: a split on another dim stays."""
    s, axis = call.sbps[0], call.attrs["axis"]
    if s.is_broadcast:
        return call.locals, call.attrs, sbp_types.broadcast
    if s.is_split and s.dim != axis:
        dropped = call.name in ("argmax", "argmin") and not call.attrs.get("keepdims") and s.dim > axis
        return call.locals, call.attrs, sbp_types.split(s.dim - 1 if dropped else s.dim)
    call.refuse(f" (axis {axis} is the split dim)" if s.is_split else "")


def _permute(call: Call):
    s = call.sbps[0]
    return call.locals, call.attrs, sbp_types.split(call.attrs["perm"].index(s.dim)) if s.is_split else s


def _reshape(call: Call):
    s, (shape,) = call.sbps[0], call.shapes
    target = list(call.attrs["shape"])
    if not s.is_split:
        return call.locals, call.attrs, s
    before = math.prod(shape[:s.dim])
    for d, size in enumerate(target):  # the split dim must survive whole, after the same-sized prefix
        if math.prod(target[:d]) == before and size == shape[s.dim]:
            local = list(target)
            local[d] = call.locals[0].shape[s.dim]
            return call.locals, {**call.attrs, "shape": local}, sbp_types.split(d)
    call.refuse(f" (the reshape from {tuple(shape)} to {tuple(target)} does not keep split dim {s.dim} whole)")


def _expand(call: Call):
    s, (shape,) = call.sbps[0], call.shapes
    target = list(call.attrs["shape"])
    if not s.is_split:
        return call.locals, call.attrs, s
    d = s.dim + len(target) - len(shape)
    local = list(target)
    local[d] = call.locals[0].shape[s.dim]
    return call.locals, {**call.attrs, "shape": local}, sbp_types.split(d)


def _concat(call: Call):
    kinds = set(call.sbps)
    if None in kinds or len(kinds) != 1:
        call.refuse(" (concat takes operands of one sbp)")
    s = kinds.pop()
    if s.is_split and s.dim == call.attrs["axis"]:
        call.refuse(" (concatenating along the split dim)")
    return call.locals, call.attrs, s


def _one_hot(call: Call):
    """The classes become a new last dim: a split on the labels stays."""
    s = call.sbps[0]
    if s.is_partial:
        call.refuse()
    return call.locals, call.attrs, s


def _batch_parallel(call: Call):
    first, rest = call.sbps[0], call.sbps[1:]
    if all(s is not None and s.is_broadcast for s in call.sbps):
        return call.locals, call.attrs, sbp_types.broadcast
    if first is not None and first == sbp_types.split(0) and all(s is not None and s.is_broadcast for s in rest):
        return call.locals, call.attrs, sbp_types.split(0)
    call.refuse(" (convolutions and pooling take a split(0) batch and broadcast weights)")


def _random(call: Call):
    s = call.sbps[0]
    if s.is_split and all(t is None or t.is_broadcast for t in call.sbps[1:]):
        return call.locals, call.attrs, s
    call.refuse(" (random draws keep a split; on broadcast tensors each rank would draw other values)")


def _replicated(call: Call):
    if all(s is None or s.is_broadcast for s in call.sbps):
        return call.locals, call.attrs, sbp_types.broadcast
    call.refuse()


RULES = types.MappingProxyType({  # op name -> rule; read-only once built
    "add": _elementwise("additive"), "sub": _elementwise("additive"), "mul": _elementwise("product"),
    "div": _elementwise("numerator"), "cast": _elementwise("linear"), "matmul": _matmul,
    "sum": _reduce, "amax": _reduce, "amin": _reduce, "softmax": _along_axis, "log_softmax": _along_axis,
    "argmax": _along_axis, "argmin": _along_axis, "permute": _permute, "reshape": _reshape,
    "expand": _expand, "concat": _concat, "one_hot": _one_hot,
    **{name: _elementwise("other") for name in OTHER_BINARY + UNARY},
    **{name: _elementwise("linear") for name in LINEAR_UNARY},
    **{name: _batch_parallel for name in BATCH_PARALLEL},
    **{name: _random for name in RANDOM},
})


def plan(call: Call):
    """``(local inputs, local attrs, output sbp)`` for ``call``."""
    return RULES.get(call.name, _replicated)(call)
