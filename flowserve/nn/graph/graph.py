"""``nn.Graph``: trace ``build()`` once, run it compiled (ONNX Runtime) from then on."""

from __future__ import annotations

import functools
import time
import warnings
from collections import OrderedDict, defaultdict

import numpy as np

from flowserve import env
from flowserve.amp import GradScaler, StaticGradScaler
from flowserve.distributed.global_tensor import graph_inputs_as_local, graph_outputs_as_global
from flowserve.distributed.graph_step import DataParallelStep
from flowserve.errors import FlowserveError, GraphError
from flowserve.nn.graph import signature as sig
from flowserve.nn.graph.batching import batch_mismatch, failure_origin
from flowserve.nn.graph.config import GraphConfig
from flowserve.nn.graph.debug import DebugPrinter, LearningRateLog, debug_mode
from flowserve.nn.graph.executor import ExecutorSpec, make_executor
from flowserve.nn.graph.inference import DeployableState, deployable_state
from flowserve.nn.graph.memory import PeakMemory
from flowserve.nn.graph.modes import Modes, noting_module_reads
from flowserve.nn.graph.optimizer_reads import check_options_unchanged, print_verbose_learning_rates
from flowserve.nn.graph.parts import GraphParts
from flowserve.nn.graph.lifecycle import trace_and_rewrite
from flowserve.nn.graph.printing import graph_repr
from flowserve.nn.graph.proxy import ProxyModule
from flowserve.nn.graph.state import graph_state_dict, load_graph_state_dict
from flowserve.nn.module import Module
from flowserve.nn.qat.prepare import prepare_graph
from flowserve.ops import creation
from flowserve.optim.optimizer import Optimizer
from flowserve.tensor import Tensor
from flowserve.utils.tree import flatten, unflatten

RETRACE_WARNING = 8  # traces caused by one attribute before the graph says it costs compiles


class Graph:
    """Base class for running neural networks in static graph mode, as OneFlow's ``nn.Graph``.

    >>> import flowserve as flow
    >>> model = flow.nn.Linear(4, 3)
    >>> class GraphMyLinear(flow.nn.Graph):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.model = model
    ...     def build(self, x):
    ...         return self.model(x)
    >>> GraphMyLinear()(flow.randn(1, 4)).shape
    flowserve.Size([1, 3])
    """

    _child_init_cnt: dict = defaultdict(int)

    def __init__(self, *, debug_v_level: int = -1, debug_ranks=None, debug_max_py_stack_depth: int = 2,
                 debug_only_user_py_stack: bool = True, debug_op_repr_with_py_stack: bool = False):
        """Initializes internal Graph states. It MUST be called in ``__init__`` of a subclass.
        The ``debug_*`` keywords are OneFlow's: ``super().__init__(debug_v_level=1)`` is
        ``self.debug(1)`` (see ``debug``)."""
        cls = type(self)
        object.__setattr__(self, "_name", f"{cls.__name__}_{Graph._child_init_cnt[cls.__name__]}")
        Graph._child_init_cnt[cls.__name__] += 1
        parts = GraphParts(train_step=creation.zeros((), dtype="int64"))
        for name, value in [("config", GraphConfig()), ("_modules", OrderedDict()), ("_parts", parts),
                            ("_forms", {}), ("_modes", None), ("_cache", None),
                            ("_debug", None), ("_lr_log", None), ("_input_names", []), ("_batch_verdicts", {}),
                            ("_warned_modules", set()), ("_retraces", {}), ("_traced_setup", None)]:
            object.__setattr__(self, name, value)
        self.debug(debug_v_level, ranks=debug_ranks, max_py_stack_depth=debug_max_py_stack_depth,
                   only_user_py_stack=debug_only_user_py_stack, op_repr_with_py_stack=debug_op_repr_with_py_stack)

    # -- attributes (OneFlow's rules) ------------------------------------------------------

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, Module):
            self._add_module(name, value)
        elif isinstance(value, Optimizer):
            raise AttributeError(
                f"'{type(self).__name__}' nn.Graph is not allowed to set Optimizer attribute named "
                f"'{name}'. Please use add_optimizer(...) instead.")
        elif isinstance(value, Tensor):
            raise AttributeError(
                f"'{type(self).__name__}' nn.Graph is not allowed to set Tensor attribute named "
                f"'{name}'. Please use nn.Module to hold the tensor, then add the nn.Module to nn.Graph.")
        else:
            object.__setattr__(self, name, value)

    def _add_module(self, name: str, module: Module) -> None:
        if "_name" not in self.__dict__:
            raise AttributeError(
                "Base class nn.Graph has not been initialized, please call super().__init__() in "
                "subclass of nn.Graph before assigning any attribute.")
        if not isinstance(name, str):
            raise TypeError(f"module name should be a string. Got {type(name)}")
        if name in self.__dict__ or (hasattr(type(self), name) and name not in self._modules):
            raise KeyError(f"attribute '{name}' already exists")
        if "." in name:
            raise KeyError(f'module name can\'t contain ".", got: {name}')
        if name == "":
            raise KeyError('module name can\'t be empty string ""')
        self._modules[name] = ProxyModule(module, name)

    def __getattr__(self, name: str):
        modules = self.__dict__.get("_modules")
        if modules is not None and name in modules:
            return modules[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    # -- public API --------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """Name auto-generated for this graph: ``ClassName_N``, N counting per class."""
        return self._name

    @property
    def training(self) -> bool:
        """In training mode if the graph has an optimizer."""
        return self.config.training

    @property
    def is_compiled(self) -> bool:
        """Whether this graph has been called (traced and compiled) yet."""
        return self._parts.last is not None

    @property
    def parts(self) -> GraphParts:
        """What the graph holds besides its modules: optimizers, grad scaler, train step and
        the compiled entry of the latest call (read by tracing, saving and printing)."""
        return self._parts

    @property
    def _last(self):
        """The compiled entry of the latest call (``parts.last``)."""
        return self._parts.last

    _compiled = _last  # the same entry, under the name benches and tests read it by

    def deploy(self):
        """Override to name the module ``flow.save`` deploys from a training graph, e.g.
        ``return self.model``. The default (None) deploys the last top-level module that
        ``build()`` called that is not a loss."""
        return None

    def deployable_state(self, model=None, dynamic_dims: dict | None = None) -> DeployableState:
        """What saving or exporting this graph writes (``flowserve.nn.graph.inference``):
        the deployed inference trace with its parameters and buffers, signature, dynamic
        dims and, for a training graph, the state resuming needs. An inference graph gives
        the trace its calls made (``build()`` does not run again); a training graph traces
        its deployed module once, in eval mode. ``model`` and ``dynamic_dims`` as in ``flow.save``."""
        return deployable_state(self, model, dynamic_dims)

    def build(self, *args, **kwargs):
        """The ``build()`` method must be overridden to define the computation of the graph."""
        raise NotImplementedError("nn.Graph.build() method must be overridden when subclassing the nn.Graph.")

    def add_optimizer(self, optim, *, lr_sch=None, is_sparse: bool = False) -> None:
        """Add an optimizer, and optionally its learning rate scheduler, to the graph.

        The compiled training step then runs the optimizer's update after ``loss.backward()``
        in ``build()``; the scheduler steps after each call."""
        if optim is None:
            raise GraphError("optimizer cannot be None")
        if not isinstance(optim, Optimizer):
            raise GraphError(f"optimizer must be an instance of Optimizer, got {type(optim).__name__}")
        if lr_sch is not None:
            if not hasattr(lr_sch, "step") or not hasattr(lr_sch, "optimizer"):
                raise GraphError(f"lr_sch must be a learning rate scheduler, got {type(lr_sch).__name__}")
            if lr_sch.optimizer is not optim:
                raise GraphError("lr_scheduler's optimizer must be the same optimizer in add_optimizer.")
        if self.is_compiled:
            raise GraphError(f"nn.Graph {self.name}: add_optimizer must be called before the first call")
        self._parts.optimizers.append((optim, lr_sch))
        self.config._train(True)

    def set_grad_scaler(self, grad_scaler=None) -> None:
        """Set the GradScaler (or StaticGradScaler) for gradient and loss scaling."""
        if not isinstance(grad_scaler, (GradScaler, StaticGradScaler)):
            raise GraphError("set_grad_scaler expects a flowserve.amp.GradScaler or StaticGradScaler, "
                             f"got {type(grad_scaler).__name__}")
        self._parts.grad_scaler = grad_scaler

    def state_dict(self, destination=None) -> OrderedDict:
        """A dictionary containing the whole state of the graph: its modules' state dicts
        under their attribute names, optimizer states, ``System-Train-TrainStep``."""
        return graph_state_dict(self, destination)

    def load_state_dict(self, state_dict, strict: bool = True) -> None:
        """Copy module states and other graph states from ``state_dict`` into this graph
        (only before the first call of the graph)."""
        load_graph_state_dict(self, state_dict, strict)

    def debug(self, v_level: int = 0, *, ranks=None, max_py_stack_depth: int = 2,
              only_user_py_stack: bool = True, op_repr_with_py_stack: bool = False) -> None:
        """Open (``v_level`` 0..3) or close (-1) the debug mode of the graph: what it prints
        while it builds and compiles at the first call (see ``flowserve.nn.graph.debug``)."""
        if not isinstance(v_level, int):
            raise GraphError(f"v_level must be an int, got {type(v_level).__name__}")
        if v_level < -1:
            raise GraphError("The min verbose debug info level is -1.")
        if v_level > 3:
            raise GraphError("The max verbose debug info level is 3.")
        if not isinstance(max_py_stack_depth, int) or max_py_stack_depth < 0:
            raise GraphError("The min max stack depth is 0.")
        rank_list = [0] if ranks is None else [ranks] if isinstance(ranks, int) else ranks
        if not isinstance(rank_list, list):
            raise ValueError("ranks must be int or List[int].")
        on = v_level >= 0 and (-1 in rank_list or 0 in rank_list)
        object.__setattr__(self, "_debug", DebugPrinter(self, v_level, max_py_stack_depth) if on else None)

    @staticmethod
    def with_dynamic_input_shape(*, size: int = 10, enable_shared: bool = True):
        """Decorate a graph's ``__init__`` to compile and cache one graph per input
        signature (at most ``size``), all sharing the same parameters."""

        def decorate(init):
            @functools.wraps(init)
            def wrapped(self, *args, **kwargs):
                init(self, *args, **kwargs)
                object.__setattr__(self, "_cache", sig.SignatureCache(size))

            return wrapped

        return decorate

    @staticmethod
    def trace(func):
        """Decorate a function to run it as an ``nn.Graph`` (OneFlow's ``nn.Graph.trace``): the
        result is a graph whose ``build`` is ``func``, traced at its first call and compiled;
        tensors it reads from its closure are constants of the graph. For training, or to save
        the graph, subclass ``nn.Graph`` instead.

        >>> import flowserve as flow
        >>> @flow.nn.Graph.trace
        ... def double(x):
        ...     return x * 2
        >>> double(flow.tensor([1.0, 2.0])).tolist()
        [2.0, 4.0]
        """
        if not callable(func):
            raise TypeError(f"nn.Graph.trace decorates a function, got {type(func).__name__}")
        return FunctionGraph(func)

    # -- calling ------------------------------------------------------------------------------

    def __call__(self, *args, **kwargs):
        """Run the graph: the first call traces ``build()`` and compiles it, later calls
        run the compiled graph. Inputs and outputs may nest tuples, lists, dicts and None."""
        args = tuple(_as_tensor_arg(a) for a in args)
        leaves, spec = flatten((args, kwargs))
        leaves, placement = graph_inputs_as_local(leaves, self.name)
        if placement is not None:  # one process: the graph runs on the global inputs' whole values
            args, kwargs = unflatten(spec, leaves)
        compiled = self._compiled_for(args, kwargs, leaves, spec)
        if self.training:
            check_options_unchanged(self, compiled.traced.optimizer_options)
            self._log_learning_rate()
            print_verbose_learning_rates(self)  # a scheduler's verbose=True, as OneFlow prints it
        first_run = self._debug is not None and compiled.peak_memory is None
        self._parts.last = compiled
        if first_run:

            with PeakMemory() as peak:
                outputs = compiled.run(leaves)
            compiled.peak_memory = peak
            self._log(0, f"first run: {peak}.")
        else:
            outputs = compiled.run(leaves)
        if not self.training:  # flow.save stores the last calls as the graph's reference examples
            # copies where the inputs are (no host round trip per call on a GPU); flow.save reads them
            self._parts.recent_inputs.append(tuple(t._data.copy() for t in leaves if isinstance(t, Tensor)))
        if self.training:
            for _, sched in self._parts.optimizers:
                if sched is not None:
                    sched.step()
        result = unflatten(compiled.traced.out_spec, outputs)
        return result if placement is None else graph_outputs_as_global(result, placement)

    def _log_learning_rate(self) -> None:
        """Under ``ONEFLOW_DEBUG_MODE``: this step's learning rate into ``train_step2lr.csv``."""
        if not debug_mode():
            return
        if self._lr_log is None:
            object.__setattr__(self, "_lr_log", LearningRateLog(env.get_rank()))
        optimizer = self._parts.optimizers[0][0]
        self._lr_log.write(int(self._parts.train_step.item()), optimizer.param_groups[0]["lr"])

    def _compiled_for(self, args, kwargs, leaves, spec):
        """The compiled form for these inputs and the modules' modes (``modes.py``): one per
        set of modes, and with ``with_dynamic_input_shape``, per input signature."""
        key = sig.signature(leaves, spec)
        if self._modes is not None:
            reason, attributes = self._modes.stale()
            reason = reason or self._setup_changes()
            if reason:
                self._log(0, f"{reason}: tracing the graph again")
                self._forget_forms()
                self._count_retraces(attributes)
        modes = self._modes.current() if self._modes is not None else None
        if self._cache is not None:
            compiled = self._cache.get((key, modes))
            if compiled is None:
                compiled = self._compile_for_modes(args, kwargs, leaves, modes)
                self._cache.put((key, compiled.modes), compiled)
            return compiled
        compiled = self._forms.get(modes)
        if compiled is None:
            compiled = self._compile_for_modes(args, kwargs, leaves, modes)
            self._forms[compiled.modes] = compiled
        elif key != compiled.key and getattr(compiled, "static_device_batch", False) \
                and sig.same_but_batch(compiled.key, key):
            # a training step lowered for CUDA is static (lowering.static_batch): an entry per batch size
            entries = self._forms.setdefault((modes, "batch sizes"), sig.SignatureCache(sig.DEVICE_ENTRIES))
            compiled = entries.get(key)
            if compiled is None:
                compiled = self._compile_for_modes(args, kwargs, leaves, modes)
                entries.put(key, compiled)
        elif key != compiled.key and not self._batch_compatible(compiled, key, args, kwargs, leaves):
            error = sig.static_input_error(self, self._input_names, compiled.key, key)
            reason = self._batch_verdicts.get((id(compiled), sig.batch_size(leaves)))
            raise GraphError(f"{error} ({reason})") if reason else error
        return compiled

    def _forget_forms(self) -> None:
        object.__setattr__(self, "_modes", None)
        self._forms.clear()
        self._batch_verdicts.clear()
        if self._cache is not None:
            self._cache.entries.clear()

    def _compile_for_modes(self, args, kwargs, leaves, modes):
        """Compile; at the first call, then note the modules whose modes tell forms apart
        (after the compile: QAT's prepare swaps modules)."""
        last = self._parts.last
        if modes is not None and last is not None and modes != last.modes:
            self._log(0, f"module modes changed since the last call ({self._modes.changes(last.modes, modes)}): "
                         "compiling the graph for them")
        with noting_module_reads() as reads:
            compiled = self._compile(args, kwargs, leaves)
        if self._modes is None:
            object.__setattr__(self, "_modes", Modes.of(self))
            object.__setattr__(self, "_traced_setup", self._setup())
        self._modes.note_reads(reads)
        compiled.modes = self._modes.current()
        return compiled

    def _setup(self) -> tuple:
        """What a trace reads of the graph itself: its config options and which parameters
        each of its optimizers' groups holds."""
        return dict(self.config.options), self._optimizer_groups()

    def _optimizer_groups(self) -> tuple:
        return tuple(tuple(map(id, group["params"])) for opt, _ in self._parts.optimizers
                     for group in opt.param_groups)

    def _setup_changes(self) -> str:
        """Why the compiled forms no longer match the graph's config or optimizers ("" if they do)."""
        options, groups = self._traced_setup
        if self.config.options != options:
            changed = sorted(k for k in options.keys() | self.config.options.keys()
                             if options.get(k) != self.config.options.get(k))
            return f"the graph's config changed since the last call ({', '.join(changed)})"
        if self._optimizer_groups() != groups:  # no copy of the config on every call
            return "an optimizer's parameter groups changed since the last call (add_param_group, add_optimizer)"
        return ""

    def _count_retraces(self, attributes: list) -> None:
        """Warn once when module attributes changing between calls have made the graph trace
        again ``RETRACE_WARNING`` times: each costs a compile."""
        counts = self._retraces
        for name in attributes:
            counts[name] = counts.get(name, 0) + 1
            if counts[name] == RETRACE_WARNING:
                warnings.warn(
                    f"nn.Graph {self.name}: {name} changed between calls {RETRACE_WARNING} times, and "
                    "each change traced and compiled the graph again (the trace wrote its value in as "
                    "a constant); hold a value that changes between calls in a tensor "
                    "(register_buffer) or pass it as an input", stacklevel=4)

    def _batch_compatible(self, compiled, key, args, kwargs, leaves) -> bool:
        """Same signature up to dim 0, and the graph is batch-polymorphic (checked once
        per batch size by tracing at it)."""
        batch = sig.batch_size(leaves)
        if not compiled.dynamic_batch or batch is None or key[0] != compiled.key[0]:
            return False
        if any(es[1:] != gs[1:] or ed != gd for (es, ed), (gs, gd) in zip(compiled.key[1], key[1])):
            return False
        verdict = (id(compiled), batch)
        if verdict not in self._batch_verdicts:

            try:
                other = self.trace_quietly(args, kwargs)
                reason = batch_mismatch(compiled.traced, compiled.batch, other, batch)
            except FlowserveError as exc:
                reason = failure_origin(exc, compiled.batch, batch)
            self._batch_verdicts[verdict] = reason
            self._log(0, f"batch size {batch} {'runs' if reason is None else 'cannot run'} on the graph "
                         f"compiled for batch size {compiled.batch}")
        return self._batch_verdicts[verdict] is None

    def _compile(self, args, kwargs, leaves):
        """The lifecycle (``flowserve.nn.graph.lifecycle``): trace + passes, then the executor."""
        start = time.perf_counter()
        self._log(0, "start building graph.")
        if self.config.options.get("qat"):
            prepare_graph(self)
        DataParallelStep.of(self)  # the distributed part of a launched training step, kept across traces
        traced = trace_and_rewrite(self, args, kwargs, on_start=self._watch)
        self._log(1, f"graph passes applied: {', '.join(traced.ir.attrs.get('passes', ())) or 'none'}")
        object.__setattr__(self, "_input_names", [v.name for v in traced.ir.inputs])
        self._log(0, f"building graph Done! Cost time: {time.perf_counter() - start:.2f}s.")
        start = time.perf_counter()
        self._log(0, "start building plan.")
        batch = sig.batch_size(leaves) if self._cache is None else None
        spec = ExecutorSpec(self.training, self.config.options, key=sig.signature(leaves, traced.in_spec), batch=batch,
                            device=next((str(t.device) for t in leaves if isinstance(t, Tensor)), "cpu"))
        compiled = make_executor(traced, spec)
        self._log(0, f"building plan Done! Cost time: {time.perf_counter() - start:.2f}s. Runs as {compiled.describe()}.")
        return compiled

    # -- internal API: what flowserve's own modules read (tracing, passes, saving, printing,
    # state_dict, QAT, distributed steps); not in the user docs ------------------------------

    def original_modules(self) -> "OrderedDict[str, Module]":
        """Attribute name -> the registered module itself (not its proxy), in assignment order."""
        return OrderedDict((k, p.to(Module)) for k, p in self._modules.items())

    def module_names(self) -> dict:
        """``id(module)`` -> its full name (``model.features.0``), for every registered module
        and submodule (the first name where one is reachable twice)."""
        names = {}
        for attr, module in self.original_modules().items():
            for sub, m in module.named_modules(prefix=attr):
                names.setdefault(id(m), sub)
        return names

    def graph_modules(self) -> dict:
        """Full module name -> its GraphModule options, for every registered module."""
        out = {}
        for attr, proxy in self._modules.items():
            for sub, m in proxy.to(Module).named_modules(prefix=attr):
                out.setdefault(sub, proxy._graph_module_of(sub, m))
        return out

    def trace_quietly(self, args, kwargs):
        """A trace that leaves no trace: no debug output, optimizer states and scaler
        untouched (the batch-size check of a call, the named-dims check of ``flow.save``)."""
        return trace_and_rewrite(self, args, kwargs, on_start=self._watch_quietly)

    def module_graph(self, attr: str, module: Module) -> "Graph":
        """A graph whose ``build()`` calls ``module`` (held as ``attr``) under this graph's
        name: how a training graph's deployed module is traced (``inference_traced``)."""
        return _ModuleGraph(attr, module, self.name)

    # -- what the tracer reports back ---------------------------------------------------------

    def _watch_quietly(self, tracer) -> None:
        tracer.on_unregistered_module = self._warn_unregistered

    def _watch(self, tracer) -> None:
        tracer.on_unregistered_module = self._warn_unregistered
        if self._debug is not None:
            self._debug.attach(tracer)
            tracer.stack_depth = max(1, self._debug.max_py_stack_depth)

    def _warn_unregistered(self, module) -> None:
        if id(module) in self._warned_modules:
            return
        self._warned_modules.add(id(module))
        warnings.warn(
            f"{type(module).__name__} is called in a nn.Graph, but not registered into a nn.Graph "
            f"({self.name}): its parameters and buffers become constants of the graph (not trained, not "
            "in state_dict()). Assign it in __init__ (self.name = module) to register it.",
            UserWarning, stacklevel=2)

    def _log(self, level: int, message: str) -> None:
        if self._debug is not None:
            self._debug.log(level, message)

    def __repr__(self) -> str:
        """The graph structure: GRAPH / CONFIG / MODULE / PARAMETER / BUFFER lines, plus
        INPUT / OUTPUT lines (of the graph and of each module) after the first call."""
        return graph_repr(self)


class _ModuleGraph(Graph):
    """Wraps one module of a training graph under the same attribute name."""

    def __init__(self, attr: str, module: Module, name: str):
        super().__init__()
        setattr(self, attr, module)
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_attr", attr)

    def build(self, *args):
        return getattr(self, self._attr)(*args)


class FunctionGraph(Graph):
    """The graph ``nn.Graph.trace`` makes of a function: ``build`` calls it."""

    def __init__(self, func):
        super().__init__()
        functools.update_wrapper(self, func, updated=())

    def build(self, *args, **kwargs):
        return self.__wrapped__(*args, **kwargs)


def _as_tensor_arg(a):
    return creation.from_numpy(a) if isinstance(a, np.ndarray) else a
