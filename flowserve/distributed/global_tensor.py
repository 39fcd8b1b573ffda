"""Global tensors, as OneFlow spells them: one logical tensor spread over the processes of a
launched run by a ``flow.placement`` and a ``flow.sbp`` (``flowserve.distributed.sbp``).

A ``GlobalTensor`` holds this rank's piece (``to_local()``), the placement, the sbp and the
logical shape (``shape``). Ops on global tensors infer the sbp of their result
(``flowserve.distributed.sbp_rules``) and run on the local pieces, so eager autograd works
through them unchanged; conversions between sbps (*boxing*) are differentiable ops on the
pieces built on the communicator's all-reduce:

======================  ==========================================================
``split -> broadcast``  all-gather (zero-padded pieces, all-reduced)
``partial_sum -> broadcast``  all-reduce
``broadcast -> split``  each rank slices its piece (no communication)
``partial_sum -> split``  reduce-scatter (all-reduce, then slice)
``split(i) -> split(j)``  all-gather, then slice
``broadcast -> partial_sum``  rank 0 keeps the value, the others hold zeros
``split -> partial_sum``  each rank zero-pads its piece to the logical shape
======================  ==========================================================

Gradients flow back in the *dual* sbp of their tensor: split for split, partial_sum for
broadcast (every rank's use adds to it), broadcast for partial_sum. A leaf's gradient is
boxed to the leaf's own sbp as it arrives (OneFlow's rule), so a broadcast weight's
``.grad`` is broadcast. In-place ops update this rank's piece (``_assign``), keeping the
tensor's sbp; ``nn.Module.to_global`` and the optimizers build on them.

>>> import flowserve as flow
>>> x = flow.ones(4, 2, placement=flow.placement.all("cpu"), sbp=flow.sbp.split(0))
>>> x.is_global, x.shape, x.sbp
(True, flowserve.Size([4, 2]), (flowserve.sbp.split(dim=0),))
"""

from __future__ import annotations

import numpy as np

from flowserve import dispatch, dtypes, env
from flowserve.autograd import no_grad
from flowserve.dispatch import Meta, infer_meta
from flowserve._repr import tensor_repr
from flowserve.device import as_device
from flowserve.distributed import sbp as sbp_types
from flowserve.distributed.sbp_rules import Call, piece, plan
from flowserve.errors import DistributedError, GraphError
from flowserve.ops import creation
from flowserve.ops import functional as ops_functional
from flowserve.ops.collective import all_reduce
from flowserve.tensor import Size, Tensor, inherit_methods
from flowserve.utils.tree import flatten, unflatten

MAX_DIMS = 8  # the metadata the ranks exchange to check a local -> global conversion


def dual(s: sbp_types.sbp) -> sbp_types.sbp:
    """The sbp of a gradient of a tensor of sbp ``s``."""
    return sbp_types.partial_sum if s.is_broadcast else (sbp_types.broadcast if s.is_partial else s)


def _refuse_data(self):
    raise dispatch.GlobalOperand(
        "a global tensor's values are spread over the ranks, and this operation reads them directly: "
        "use .to_local() for this rank's piece or .numpy() for the logical value")


class GlobalTensor(Tensor):
    """A logical tensor spread over the ranks (``x.is_global`` is True). Build one with
    ``local.to_global(placement, sbp)`` or a creation function given ``placement=`` and
    ``sbp=``; ``to_local()`` is this rank's piece, ``numpy()`` the logical value."""

    __slots__ = ("_local", "_placement", "_sbp", "_logical", "_grad_synced")
    _data = property(_refuse_data)

    @classmethod
    def _make(cls, local: Tensor, placement: sbp_types.placement, sbp: sbp_types.sbp, shape) -> "GlobalTensor":
        t = object.__new__(cls)
        t._local, t._placement, t._sbp, t._logical = local, placement, sbp, Size(shape)
        t._lazy, t._dtype, t._device = None, local._dtype, local._device
        t._requires_grad, t._node, t._out_index, t._version = False, None, 0, 0
        t._grad_synced = False
        return t

    @classmethod
    def _leaf(cls, value: "GlobalTensor", requires_grad: bool) -> "GlobalTensor":
        """A new leaf of class ``cls`` holding ``value``'s pieces (``Parameter.to_global``)."""
        out = cls._make(value._local.detach(), value._placement, value._sbp, value._logical)
        return out.requires_grad_() if requires_grad else out

    # -- what makes it global ---------------------------------------------------------------

    @property
    def shape(self) -> Size:
        return self._logical

    @property
    def is_global(self) -> bool:
        return True

    @property
    def is_local(self) -> bool:
        return False

    @property
    def placement(self) -> sbp_types.placement:
        return self._placement

    @property
    def sbp(self) -> tuple:
        return (self._sbp,)

    def to_local(self) -> Tensor:
        """This rank's piece (the same tensor: gradients flow through it)."""
        return self._local

    def to_global(self, placement=None, sbp=None, **kwargs) -> "GlobalTensor":
        """The same logical tensor with another sbp (boxing, a collective: every rank calls it).
        ``grad_sbp=`` names the sbp the gradient passes through on its way back (OneFlow's);
        on a Parameter the result is a new Parameter (a leaf) with the converted value."""
        grad_sbp = _check_kwargs(kwargs, self.ndim)
        if placement is not None and placement != self._placement:
            raise DistributedError(f"to_global: moving a global tensor from {self._placement} to {placement} is "
                                   "not supported; flowserve's global tensors span every rank")
        if sbp is None and grad_sbp is None:
            return self
        target = self._sbp if sbp is None else sbp_types.as_sbp(sbp, "to_global")
        _check_split(target, self.ndim, "to_global")
        kind = getattr(type(self), "_global_class", None)
        if kind is not None:  # a Parameter stays a Parameter: a new leaf
            if target == self._sbp:
                return self
            with no_grad():
                moved = GlobalTensor._make(box(self._local, self._logical, self._sbp, target), self._placement,
                                           target, self._logical)
            return kind._leaf(moved, self.requires_grad)
        if target == self._sbp and grad_sbp is None:
            return self
        local = box(self._local, self._logical, self._sbp, target)
        if grad_sbp is not None:
            if local is self._local:  # a new tensor for the hook, not this one
                local = ops_functional.clone(local)
            local = _through_grad_sbp(local, self._logical, target, grad_sbp)
        return GlobalTensor._make(local, self._placement, target, self._logical)

    # -- autograd, on the local pieces -------------------------------------------------------

    @property
    def requires_grad(self) -> bool:
        return self._local.requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        self._local.requires_grad = value
        if value and self._local.is_leaf and not self._grad_synced:
            # OneFlow's rule for leaves: the gradient is boxed to the leaf's own sbp as it
            # arrives (a broadcast weight's partial_sum pieces are all-reduced in backward)
            self._local.register_hook(_grad_sync(self._logical, self._sbp))
            self._grad_synced = True

    def requires_grad_(self, requires_grad: bool = True) -> "GlobalTensor":
        self.requires_grad = requires_grad
        return self

    @property
    def is_leaf(self) -> bool:
        return self._local.is_leaf

    @property
    def grad_fn(self):
        return self._local.grad_fn

    def _grad_sbp(self) -> sbp_types.sbp:
        """A leaf's gradient has the leaf's sbp (boxed as it arrives); an intermediate
        tensor's gradient pieces have the dual sbp."""
        return self._sbp if self._grad_synced else dual(self._sbp)

    @property
    def grad(self):
        g = self._local.grad
        return None if g is None else GlobalTensor._make(g, self._placement, self._grad_sbp(), self._logical)

    @grad.setter
    def grad(self, value) -> None:
        if value is not None:
            value = _as_global(value, "grad")
            if tuple(value.shape) != tuple(self._logical):
                raise DistributedError(f"grad: expected a gradient of size {tuple(self._logical)}, "
                                       f"got {tuple(value.shape)}")
            value = value.to_global(sbp=self._grad_sbp())._local
        self._local.grad = value

    # -- in place: this rank's piece takes the result's piece ----------------------------------

    def _assign(self, other: Tensor) -> "GlobalTensor":
        """``x.op_(...)`` on a global tensor: the result must have ``x``'s sbp (its piece is
        stored in ``x``'s piece); a local result (a fill) is rank 0's value, laid out as ``x``."""
        if not isinstance(other, GlobalTensor):
            with no_grad():
                other = from_logical(other, self._placement, self._sbp, same_on_every_rank=False)
        elif other._placement != self._placement:
            raise DistributedError(f"in-place update of a global tensor on {self._placement} with one on "
                                   f"{other._placement}")
        elif other._sbp != self._sbp:
            raise DistributedError(
                f"in-place update of a global tensor of sbp {self.sbp}: the result has sbp {other.sbp}, and an "
                "in-place op keeps the tensor's sbp; convert the operands first (for example "
                f"y.to_global(sbp={_spelled(self._sbp)})) or use copy_, which converts its source")
        self._local._assign(other._local)
        self._version += 1
        return self

    def copy_(self, src, non_blocking: bool = False) -> "GlobalTensor":
        """The logical value of ``src`` (a global tensor of any sbp is converted to this one's;
        a local tensor is rank 0's value)."""
        value = ops_functional.expand(ops_functional.cast(src, self._dtype), tuple(self._logical))
        if isinstance(value, GlobalTensor) and value._sbp != self._sbp:
            value = value.to_global(sbp=self._sbp)
        return self._assign(value)

    @property
    def data(self) -> "GlobalTensor":
        return self.detach()

    @data.setter
    def data(self, value) -> None:
        if isinstance(value, GlobalTensor):
            if tuple(value.shape) != tuple(self._logical):
                raise DistributedError(f"data: expected a global tensor of size {tuple(self._logical)}, "
                                       f"got {tuple(value.shape)}")
            value = value.to_global(sbp=self._sbp)
        else:
            value = from_logical(value, self._placement, self._sbp, same_on_every_rank=False)
        with no_grad():
            self._local.data = value._local.detach()
        self._dtype = self._local._dtype
        self._version += 1

    def __deepcopy__(self, memo: dict) -> "GlobalTensor":
        """A copy with its own pieces (``copy.deepcopy(model)`` of a global model): a leaf
        stays a leaf of the same class, with its gradient copied."""
        with no_grad():
            out = type(self)._make(
                ops_functional.clone(self._local.detach()), self._placement, self._sbp, self._logical
            )
            if self.requires_grad and self.is_leaf:
                out.requires_grad_()
            if self._local.grad is not None:
                out._local.grad = ops_functional.clone(self._local.grad)
        memo[id(self)] = out
        return out

    def _global_like(self, make, requires_grad: bool = False, random: bool = False) -> "GlobalTensor":
        """``zeros_like(x)`` and friends of a global ``x``: global, with its placement and sbp."""
        with no_grad():
            out = from_logical(make(), self._placement, self._sbp, same_on_every_rank=not random)
        return out.requires_grad_() if requires_grad else out

    def backward(self, gradient=None, retain_graph=None, create_graph: bool = False, inputs=None) -> None:
        """Gradients of the logical tensor: seeds each rank's piece with its share of
        ``gradient`` (ones for a one-element tensor), in the dual sbp."""
        if gradient is None:
            if self._logical.numel() != 1:
                raise DistributedError(f"backward: grad can be implicitly created only for one-element "
                                       f"outputs, got a global tensor of size {tuple(self._logical)}")
            seed = creation.ones_like(self._local)
            if self._sbp.is_broadcast and env.get_rank() != 0:  # partial_sum: counted once
                seed = creation.zeros_like(self._local)
        else:
            seed = _as_global(gradient, "backward").to_global(sbp=dual(self._sbp))._local
        local_inputs = None if inputs is None else [t._local if isinstance(t, GlobalTensor) else t for t in inputs]
        self._local.backward(seed, retain_graph=retain_graph, create_graph=create_graph, inputs=local_inputs)

    def detach(self) -> "GlobalTensor":
        return GlobalTensor._make(self._local.detach(), self._placement, self._sbp, self._logical)

    # -- values (collectives: every rank calls them) ---------------------------------------

    def _eager_data(self, what: str):
        with no_grad():
            return self.to_global(sbp=sbp_types.broadcast)._local.numpy()

    def numpy(self) -> np.ndarray:
        """The logical value, on every rank (gathered: every rank must call it)."""
        return self._eager_data("Tensor.numpy()")

    def __repr__(self) -> str:
        text = tensor_repr(self)
        where = f"placement={self._placement!r}, sbp={self.sbp!r}, dtype="
        return text.replace("dtype=", where, 1)


# -- boxing: one sbp to another, on this rank's piece ---------------------------------------


def _padded(piece: Tensor, dim: int, shape, rank: int, world: int) -> Tensor:
    """This rank's piece in a zero tensor of the logical shape (a partial_sum of the split)."""
    sizes = sbp_types.split_sizes(shape[dim], world)
    before, after = sum(sizes[:rank]), sum(sizes[rank + 1:])
    parts = []
    for n in (before, after):
        pad_shape = list(piece.shape)
        pad_shape[dim] = n
        parts.append(creation.zeros(*pad_shape, dtype=piece.dtype, device=piece.device))
    return ops_functional.cat([parts[0], piece, parts[1]], dim)


def _root_only(local: Tensor, rank: int) -> Tensor:
    """Rank 0's piece, exact zeros elsewhere (``where``, not ``* 0``: an inf or NaN on another
    rank stays out of the sum); differentiable, with a zero gradient on the other ranks."""
    if rank == 0:
        return local
    return ops_functional.where(
        creation.zeros(*local.shape, dtype=dtypes.bool_, device=local.device), local, creation.zeros_like(local)
    )


def _grad_sync(shape, s: sbp_types.sbp):
    """The leaf hook: a gradient arriving in the dual sbp, boxed to the leaf's sbp ``s``."""
    src = dual(s)

    def sync(g: Tensor) -> Tensor:
        return box(g, shape, src, s)

    return sync


def _through_grad_sbp(local: Tensor, shape, s: sbp_types.sbp, grad_sbp: sbp_types.sbp) -> Tensor:
    """``local`` (a piece of sbp ``s``) whose gradient, on its way back, is boxed to
    ``grad_sbp`` and from there to the dual sbp the pieces before it expect (OneFlow's
    ``grad_sbp=``: where the backward's communication happens)."""
    if grad_sbp == dual(s):
        return local

    def through(g: Tensor) -> Tensor:
        return box(box(g, shape, dual(s), grad_sbp), shape, grad_sbp, dual(s))

    if local.requires_grad:
        local.register_hook(through)
    return local


def _spelled(s: sbp_types.sbp) -> str:
    return f"flow.sbp.split({s.dim})" if s.is_split else f"flow.sbp.{s.kind}"


def box(local: Tensor, shape, src: sbp_types.sbp, dst: sbp_types.sbp) -> Tensor:
    """This rank's piece of the logical tensor ``shape`` held as ``src``, re-laid out as ``dst``."""
    world, rank = env.get_world_size(), env.get_rank()
    if src == dst:
        return local
    if src.is_split:
        as_partial = _padded(local, src.dim, shape, rank, world)
        if dst.is_partial:
            return as_partial
        full = all_reduce(as_partial)  # the all-gather of the pieces
        return full if dst.is_broadcast else piece(full, dst.dim, shape, rank, world)
    if src.is_partial:
        full = all_reduce(local)
        return full if dst.is_broadcast else piece(full, dst.dim, shape, rank, world)
    # broadcast
    return _root_only(local, rank) if dst.is_partial else piece(local, dst.dim, shape, rank, world)


# -- local -> global ---------------------------------------------------------------------------


def _check_kwargs(kwargs: dict, ndim: int):
    """The keyword arguments of ``to_global``; returns ``grad_sbp`` (an sbp or None)."""
    unknown = set(kwargs) - {"check_meta", "copy", "grad_sbp"}
    if unknown:
        raise TypeError(f"to_global got unexpected keyword arguments {sorted(unknown)}")
    grad_sbp = kwargs.get("grad_sbp")
    if grad_sbp is None or (isinstance(grad_sbp, (list, tuple)) and not grad_sbp):
        return None
    grad_sbp = sbp_types.as_sbp(grad_sbp, "to_global(grad_sbp=)")
    _check_split(grad_sbp, ndim, "to_global(grad_sbp=)")
    return grad_sbp


def _check_split(s: sbp_types.sbp, ndim: int, where: str) -> None:
    if s.is_split and s.dim >= ndim:
        raise DistributedError(f"{where}: {s!r} needs a tensor with more than {s.dim} dims, got {ndim}")


def _gathered_meta(local: Tensor) -> np.ndarray:
    """Every rank's (ndim, dtype, shape...) as rows (one all-gather)."""
    if local.ndim > MAX_DIMS:
        raise DistributedError(f"to_global: tensors of up to {MAX_DIMS} dims, got {local.ndim}")
    row = np.full(MAX_DIMS + 2, -1, np.int64)
    row[0], row[1] = local.ndim, dtypes.ALL.index(local.dtype)
    row[2:2 + local.ndim] = tuple(local.shape)
    return env.communicator().all_gather(row.reshape(1, -1))


def _logical_shape(local: Tensor, target: sbp_types.sbp, check_meta: bool) -> tuple:
    world = env.get_world_size()
    shape = list(local.shape)
    if not check_meta or world == 1:
        if target.is_split:
            shape[target.dim] *= world
        return tuple(shape)
    rows = _gathered_meta(local)
    ndim = local.ndim
    same = [i for i in range(ndim) if not (target.is_split and i == target.dim)]
    if (rows[:, 0] != ndim).any() or (rows[:, 1] != rows[0, 1]).any() or \
            (rows[:, 2:2 + ndim][:, same] != rows[0, 2:2 + ndim][same]).any():
        given = [(tuple(int(d) for d in r[2:2 + r[0]]), dtypes.ALL[int(r[1])].name) for r in rows]
        what = f"the same size except dim {target.dim}" if target.is_split else "the same size"
        raise DistributedError(f"to_global with {target!r}: every rank's local tensor must have {what} and "
                               f"dtype, got {given} on ranks 0..{world - 1}")
    if target.is_split:
        sizes = [int(r[2 + target.dim]) for r in rows]
        expected = sbp_types.split_sizes(sum(sizes), world)
        if sizes != expected:
            raise DistributedError(f"to_global with {target!r}: the pieces along dim {target.dim} have sizes "
                                   f"{sizes}, but a split of {sum(sizes)} over {world} ranks has sizes {expected}")
        shape[target.dim] = sum(sizes)
    return tuple(shape)


def local_to_global(local: Tensor, placement=None, sbp=None, **kwargs) -> GlobalTensor:
    """``Tensor.to_global(placement, sbp)`` of a local tensor: it becomes this rank's piece
    (split, partial_sum); for broadcast, rank 0's tensor is sent to every rank."""
    _check_kwargs(kwargs, local.ndim)  # grad_sbp is only used on global tensors, as in OneFlow
    if placement is None or sbp is None:
        raise DistributedError("to_global of a local tensor needs both placement= and sbp= "
                               "(for example placement=flow.placement.all('cpu'), sbp=flow.sbp.broadcast)")
    if not isinstance(placement, sbp_types.placement):
        raise DistributedError(f"to_global: placement must be a flow.placement, got {placement!r}")
    placement.check_spans_world("to_global")
    target = sbp_types.as_sbp(sbp, "to_global")
    _check_split(target, local.ndim, "to_global")
    kind = getattr(type(local), "_global_class", None)
    if kind is not None:  # a Parameter becomes a global Parameter (a new leaf)
        with no_grad():
            value = local_to_global(local.detach(), placement, target, check_meta=kwargs.get("check_meta", True))
        return kind._leaf(value, local.requires_grad)
    shape = _logical_shape(local, target, kwargs.get("check_meta", True))
    if kwargs.get("copy"):
        local = ops_functional.clone(local)
    if target.is_broadcast and env.get_world_size() > 1:
        local = all_reduce(_root_only(local, env.get_rank()))  # rank 0's value, everywhere
    return GlobalTensor._make(local, placement, target, shape)


def from_logical(logical: Tensor, placement, sbp, *, same_on_every_rank: bool = True) -> GlobalTensor:
    """The global tensor whose logical value is ``logical`` (rank 0's, where the ranks'
    values may differ, as random draws do)."""
    if placement is None or sbp is None:
        raise DistributedError("a global tensor needs both placement= and sbp=, got "
                               f"placement={placement!r}, sbp={sbp!r}")
    if not isinstance(placement, sbp_types.placement):
        raise DistributedError(f"placement must be a flow.placement, got {placement!r}")
    placement.check_spans_world("placement")
    target = sbp_types.as_sbp(sbp, "sbp")
    _check_split(target, logical.ndim, "sbp")
    world, rank = env.get_world_size(), env.get_rank()
    if not same_on_every_rank and world > 1:
        logical = all_reduce(_root_only(logical, rank))
    local = box(logical, tuple(logical.shape), sbp_types.broadcast, target)
    if placement.type != logical.device.type:
        local = local.to(as_device(placement.type))
    return GlobalTensor._make(local, placement, target, tuple(logical.shape))


def _as_global(value, where: str) -> GlobalTensor:
    if not isinstance(value, GlobalTensor):
        raise DistributedError(f"{where}: expected a global tensor, got a local tensor of size {tuple(value.shape)}")
    return value


# -- global tensors at an nn.Graph's boundary ---------------------------------------------------


def graph_inputs_as_local(leaves: list, graph_name: str) -> tuple[list, sbp_types.placement | None]:
    """The inputs an ``nn.Graph`` runs on, and the placement of its global inputs (None when
    it has none). In a run of one process a global tensor's piece is its whole logical value
    whatever its sbp, so the graph runs on the pieces; a launched run's graph is data
    parallel by itself and takes this rank's local tensors."""
    globals_ = [t for t in leaves if isinstance(t, GlobalTensor)]
    if not globals_:
        return leaves, None
    graph_piece(globals_[0], graph_name)  # refused in a launched run
    placements = {t.placement for t in globals_}
    if len(placements) > 1:
        raise GraphError(f"nn.Graph {graph_name}: its global inputs have different placements "
                         f"{sorted(map(repr, placements))}")
    return [t.to_local() if isinstance(t, GlobalTensor) else t for t in leaves], placements.pop()


def graph_piece(t: GlobalTensor, graph_name: str) -> Tensor:
    """What an ``nn.Graph`` computes with for the global tensor ``t`` (an input, a parameter,
    a buffer, optimizer state, a value made global inside build()): in a run of one process
    its local piece, the whole logical value whatever its sbp. A launched run's graph is data
    parallel by itself and takes local tensors and modules: there it is an error."""
    world = env.get_world_size()
    if world > 1:
        raise GraphError(f"a global tensor (size {tuple(t.shape)}, sbp {t.sbp}) reached nn.Graph {graph_name} in a "
                         f"run of {world} processes: graphs there take local tensors and modules; pass x.to_local() "
                         "and train a local module (a graph run in a launched process is data parallel by itself, "
                         "see docs/distributed.md)")
    return t._local


def graph_outputs_as_global(outputs, placement: sbp_types.placement):
    """A graph's outputs (a nest of tensors) as global tensors on ``placement``, sbp broadcast:
    the whole value, as every sbp is on the one rank of ``graph_inputs_as_local``'s runs."""
    leaves, spec = flatten(outputs)
    return unflatten(spec, [GlobalTensor._make(t, placement, sbp_types.broadcast, tuple(t.shape)) for t in leaves])


# -- ops on global tensors ---------------------------------------------------------------------


def process(prim, inputs: tuple, attrs: dict) -> tuple:
    """``prim`` on ``inputs`` of which some are global: infer the result's sbp
    (``sbp_rules``), run the primitive on this rank's pieces, wrap the results."""
    placement = None
    for t in inputs:
        if isinstance(t, GlobalTensor):
            if placement is not None and t._placement != placement:
                raise DistributedError(f"{prim.name}: global operands on different placements, {placement} and "
                                       f"{t._placement}")
            placement = t._placement
        elif t.ndim != 0:
            raise DistributedError(
                f"{prim.name}: a local tensor of size {tuple(t.shape)} meets a global tensor; make it global first, "
                "for example x.to_global(placement=flow.placement.all('cpu'), sbp=flow.sbp.broadcast)")
    metas = infer_meta(prim, [Meta(tuple(t.shape), t.dtype) for t in inputs], attrs)  # the op's own shape errors
    call = Call(prim.name, [t._local if isinstance(t, GlobalTensor) else t for t in inputs], attrs,
                [t._sbp if isinstance(t, GlobalTensor) else None for t in inputs],
                [tuple(t.shape) for t in inputs], tuple(metas[0].shape))
    local_inputs, local_attrs, out_sbp = plan(call)
    result = prim(*local_inputs, **local_attrs)
    outs = result if prim.multiple_results else (result,)
    return tuple(GlobalTensor._make(o, placement, out_sbp, m.shape) for o, m in zip(outs, metas))


dispatch.set_global_rules(process)


# -- the local tensor's side ------------------------------------------------------------------


class LocalTensorAttributeError(DistributedError, AttributeError):
    """A global-only attribute read on a local tensor (``hasattr`` is False)."""


class LocalPlacementMethods:
    """The placement face of a local tensor (``Tensor`` inherits it): ``x.to_global(...)``
    makes it global; the global-only attributes say how."""

    __slots__ = ()

    to_global = local_to_global

    def _global_from_logical(self, placement, sbp, same_on_every_rank: bool = True):
        """The global tensor whose logical value is this tensor (``flowserve.ops.creation``'s
        ``placement=``/``sbp=``)."""
        return from_logical(self, placement, sbp, same_on_every_rank=same_on_every_rank)

    def to_local(self):
        raise DistributedError("to_local() expects a global tensor; this one is local (x.is_global is False)")

    @property
    def placement(self):
        raise LocalTensorAttributeError("a local tensor has no placement; make it global with "
                                        "x.to_global(placement=flow.placement.all('cpu'), sbp=...)")

    @property
    def sbp(self):
        raise LocalTensorAttributeError(
            "a local tensor has no sbp; make it global with x.to_global(placement=..., sbp=...)")

    @property
    def is_local(self) -> bool:
        return True


inherit_methods(Tensor, LocalPlacementMethods)
