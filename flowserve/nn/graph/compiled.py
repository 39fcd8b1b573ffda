"""A compiled signature of an ``nn.Graph``: its ONNX Runtime session and state plumbing.

Training graphs take parameters and optimizer state as inputs and return their new
values. The session is persistent and IO-bound: every state tensor has two buffers of
the graph's own used in turn (ping-pong, ``state_buffers.StatePair``) — the call reads
the current one and ONNX Runtime writes the new value straight into the other, which
the eager tensor then holds. No state is copied per call, the eager module always holds
the graph's values, and the graph never writes into an array it did not allocate or one
still read elsewhere (the user's array of ``flow.from_numpy``, an array taken with
``.numpy()``, a view of a parameter): those keep their values, as in eager mode. User
outputs rotate through ``config.set_outputs_buffer_size(n)`` sets of buffers per shape
and are copied out.
A graph that updates no state (inference) skips the binding: ``session.run`` hands back
new outputs for each call, so no buffer of ours is bound, rotated or copied.

Inference graphs carry parameters as initializers (ONNX Runtime folds and re-lays them
out) and are rebuilt when a parameter changes in eager mode (version counters).

A graph runs where its tensors are: the device of its state (else of its first call's
inputs). On "cuda" (``config`` provider "auto") the session is ONNX Runtime's CUDA
provider and nothing crosses to the host: inputs, state and outputs are CuPy arrays
bound by address, the ping-pong state buffers are device buffers, and the eager tensors
hold them, so ``state_dict()`` and eager code see the graph's values where they are.
An output (the loss) is copied to the host only when it is read.
"""

from __future__ import annotations

import re
import warnings
from types import MappingProxyType

import numpy as np

from flowserve import dtypes
from flowserve.device import CPU, array_module, device as Device, to_device_array
from flowserve.errors import GraphError
from flowserve.nn.graph import provider_choice
from flowserve.nn.graph.lowering import lower_traced, static_batch
from flowserve.nn.graph.state_buffers import StatePair
from flowserve.nn.graph.trace import Traced
from flowserve.onnx_backend import providers, runtime
from flowserve.onnx_backend.session_pool import SessionPool
from flowserve.tensor import Tensor


BATCH_SESSIONS = 8  # batch sizes a device run keeps a session for (_device_session)


def _versions(state: dict, skip=()) -> tuple:
    return tuple((id(t._data), t._version) for k, t in state.items() if k not in skip)


class CompiledGraph:
    def __init__(self, traced: Traced, training: bool, options: dict | None = None,
                 dynamic_batch: bool = False, key=None, batch: int | None = None,
                 dynamic_dims: dict | None = None, device: str = "cpu"):
        self.traced = traced
        self.device = _graph_device(traced.state, device)
        self.dynamic_dims = dynamic_dims or {}  # tensor name -> {axis: dim name}: free sizes (named_dims.py)
        self.training = training
        self.options = options or {}
        # a training step lowered for CUDA is static: another batch size compiles another entry
        self.static_device_batch = dynamic_batch and static_batch(training, self.options, self.device.type)
        self.dynamic_batch = dynamic_batch and not self.static_device_batch
        self.key = key
        inputs = traced.ir.inputs
        if batch is None and dynamic_batch and inputs and inputs[0].shape:
            batch = inputs[0].shape[0]  # the batch size lower_ir makes symbolic
        self.batch = batch
        self.output_names = [v.name for v in traced.ir.outputs]
        self.update_names = list(traced.ir.updates)
        self._buffers: dict = {}  # state name -> its StatePair
        self._out_ring: list = []  # (output arrays, OrtValues over them) per set
        self._out_index = 0
        self.peak_memory = None
        self.engine = None  # the engine measured fastest ("auto"), else the configured one
        self.engine_choice = None  # EngineChoice where "auto" compared engines
        self._choice_pending = None  # "auto": the cache path to write the measurement to
        self._draws = False  # "auto" measuring a graph that draws random numbers (_choose_engine)
        self._runs = 0
        self._bound_session, self._device_bound = None, False  # _binds_on_device
        chosen = providers.PROVIDERS.get(self.options.get("execution_provider"))
        self._explicit_check = self.training and chosen is not None and chosen.measured_by_auto
        self._build_session()

    def engine_options(self, engine: str | None = None) -> dict:
        """The options the model is lowered and its session made with: the configured ones,
        the execution provider replaced by ``engine`` (else the engine in use) where set."""
        engine = engine or self.engine
        return self.options if engine is None else {**self.options, "execution_provider": engine}

    def _lower(self, fed: list, baked: dict, options: dict | None = None, dynamic_batch: bool | None = None):
        options = self.engine_options() if options is None else options
        return lower_traced(self.traced, self.training, options, fed, baked, device=self.device.type,
                            dynamic_batch=self.dynamic_batch if dynamic_batch is None else dynamic_batch,
                            dynamic_dims=self.dynamic_dims)

    def _session_for(self, engine: str) -> tuple:
        """(model, session, dynamic batch) lowered and compiled for ``engine``, with the
        dynamic batch where the engine compiles it, else the static one."""
        options = self.engine_options(engine)
        try:
            model = self._lower(self.fed_state, self._baked, options)
            return model, self._session(model, options), self.dynamic_batch
        except Exception:
            if not self.dynamic_batch:
                raise
        model = self._lower(self.fed_state, self._baked, options, dynamic_batch=False)
        return model, self._session(model, options), False

    def _session(self, model, options: dict):
        """A session of ``model`` on the graph's device ("auto" provider) or the configured provider."""
        if self.device.type == "cuda" and options.get("execution_provider", providers.AUTO) == providers.AUTO \
                and not runtime.cuda_usable():
            raise GraphError(f"nn.Graph {self.traced.ir.name}: its tensors are on {self.device}, but onnxruntime "
                             "has no usable CUDA provider (install onnxruntime-gpu: pip install "
                             "\"flowserve[cuda]\"), or move the module and inputs to the CPU")
        return providers.create_session(model, device=self.device.type, options=options)

    def _build_session(self) -> None:
        state = self.traced.state
        if self.training:
            ir = self.traced.ir
            fed = [k for k in ir.state if ir.state_kinds[k] != "constant"]
            baked = dict(self.traced.constants)
        else:
            fed = list(self.traced.system_feeds) + self.update_names  # buffers a build updates
            baked = {**self.traced.constants,
                     **{k: t.numpy() for k, t in state.items() if k not in fed}}
        self.fed_state, self._baked = fed, baked
        try:
            self.model = self._lower(fed, baked)
            self.session = self._session(self.model, self.engine_options())
        except Exception as exc:
            missing = _missing_kernel(exc, self.traced.ir)
            if missing is not None:
                raise GraphError(missing) from None
            if not self.dynamic_batch:
                raise
            self.dynamic_batch = False  # some lowering needs the static batch size
            self.model = self._lower(fed, baked)
            self.session = self._session(self.model, self.engine_options())
        self.versions = _versions(state, self.update_names)
        self._out_ring = []
        self._batch_sessions = None  # SessionPool by batch size, made at the first device run (_device_session)
        if self.options.get("execution_provider", providers.AUTO) == providers.AUTO and self.engine is None:
            self._take_cached_choice()

    # -- the engine ("auto": measured; an explicit one: checked against ONNX Runtime) ----------

    def _ort_engine(self) -> str:
        return providers.onnxruntime_name(self.device.type)

    def _take_cached_choice(self) -> None:
        """"auto" at the first compile: the engine of an earlier measurement of this graph
        on this machine, else a measurement at the next call (where there is a choice)."""
        ort_name = self._ort_engine()
        self.engine = ort_name
        names = provider_choice.candidates(ort_name)
        if len(names) == 1:
            return
        path = provider_choice.cache_path(self.model)
        choice = provider_choice.load_cached(path, names)
        if choice is None:
            self._choice_pending, self._draws = path, provider_choice.draws_random(self.model)
            return
        self.engine_choice = choice
        provider_choice.LOG.info("nn.Graph %s runs on %s", self.traced.ir.name, choice.describe())
        if choice.engine != ort_name:
            self.model, self.session, self.dynamic_batch = self._session_for(choice.engine)

    def _choose_engine(self, feeds: dict) -> None:
        """"auto" at the second call (the first traced and compiled): time the candidates on
        this call's feeds, keep the fastest, cache the choice.

        A graph that draws random numbers is measured at its first call instead, and then
        runs on a session of the chosen engine that has not run yet: each session's random
        nodes keep their generators across runs, so the runs measured would shift every
        later draw, and a process that takes the choice from the cache (and runs on that
        engine from its first call) would draw other numbers under the same
        ``flow.manual_seed``."""
        path, self._choice_pending = self._choice_pending, None
        ort_name, built = self.engine, {}

        def build(name):
            def make():
                built[name] = (self.model, self.session, self.dynamic_batch) if name == ort_name \
                    else self._session_for(name)
                return built[name][1]
            return make

        choice = provider_choice.measure({name: build(name) for name in provider_choice.candidates(ort_name)}, feeds,
                                self.output_names, self.traced.ir.name, compare=not provider_choice.draws_random(self.model))
        self.engine_choice = choice
        provider_choice.save_cached(path, choice)
        self.engine = choice.engine
        self.model, self.session, self.dynamic_batch = built[choice.engine]
        if self._draws:
            self.model, self.session, self.dynamic_batch = self._session_for(choice.engine)

    def _check_explicit_engine(self, feeds: dict) -> None:
        """An explicitly chosen OpenVINO, at the second call of a training graph: timed
        against ONNX Runtime on this call's feeds; a warning where it is ``SLOWER`` times
        slower or more."""
        self._explicit_check = False
        chosen, ort_name = self.options["execution_provider"], self._ort_engine()
        builders = {ort_name: lambda: self._session_for(ort_name)[1], chosen: lambda: self.session}
        choice = provider_choice.measure(builders, feeds, self.output_names,
                                self.traced.ir.name, quiet=True, compare=not provider_choice.draws_random(self.model))
        self.engine_choice = choice
        times = choice.step_ms
        if chosen in choice.dropped or (ort_name in times and times[chosen] >= provider_choice.SLOWER * times[ort_name]):
            warnings.warn(f"nn.Graph {self.traced.ir.name}: execution provider {chosen!r} is "
                          f"{provider_choice.SLOWER:g}x slower than ONNX Runtime or more for this graph on this machine "
                          f"({choice.describe()}); set_execution_provider('auto') picks the fastest",
                          UserWarning, stacklevel=4)

    # -- the executor interface (flowserve.nn.graph.executor) ---------------------------------

    @property
    def state(self) -> dict:
        return self.traced.state

    def describe(self) -> str:
        batch = f"batch {self.batch}, dynamic" if self.dynamic_batch else f"batch {self.batch}" if self.batch else "static"
        on = f", engine {self.engine_choice.describe()}" if self.engine_choice is not None else ""
        return (f"single session ({'training' if self.training else 'inference'}, {batch}, "
                f"{len(self.traced.ir.nodes)} nodes{on})")

    # -- running ------------------------------------------------------------------------------

    def run(self, inputs: list) -> list[Tensor]:
        if self._binds_on_device():
            return self._run_on_device(inputs)
        state = self.traced.state
        if not self.training and _versions(state, self.update_names) != self.versions:
            self._build_session()  # a parameter changed in eager mode since compilation
        fed = [(v.name, _host(t)) for v, t in zip(self.traced.ir.inputs, inputs)]
        for name in self.fed_state:
            feed = self.traced.system_feeds.get(name)
            fed.append((name, feed() if feed is not None else _host(state[name])))
        self._runs += 1
        if self._choice_pending is not None and (self._runs > 1 or self._draws):
            self._choose_engine(dict(fed))
        elif self._runs > 1 and self._explicit_check:
            self._check_explicit_engine(dict(fed))
        device = inputs[0].device if inputs else CPU
        if not self.update_names:  # no state to write back: the runtime allocates the outputs
            outs = self.session.run(self.output_names, dict(fed))
            return [Tensor._wrap(to_device_array(_as_ir_dtype(out, v.dtype, copy=False), device), device)
                    for out, v in zip(outs, self.traced.ir.outputs)]
        binding = self.session.io_binding()
        for name, array in fed:  # ``fed`` keeps every bound array alive until the run is over
            binding.bind_cpu_input(name, array)
        new_state = self._bind_state_outputs(binding)
        outs = self._bind_user_outputs(binding, inputs)
        self.session.run_with_iobinding(binding)
        del fed
        for name, array in new_state.items():
            target = state[name]
            target._set_value(to_device_array(array, target.device))
        return [Tensor._wrap(to_device_array(_as_ir_dtype(out, v.dtype), device), device)
                for out, v in zip(outs, self.traced.ir.outputs)]

    def _binds_on_device(self) -> bool:
        """Whether the session runs on the CUDA provider for a graph whose tensors are on
        the GPU (then nothing is bound in host memory); noted per session."""
        if self._bound_session is not self.session:
            self._bound_session = self.session
            self._device_bound = self.device.type == "cuda" and providers.of_session(self.session).device == "cuda"
        return self._device_bound

    def _device_session(self, inputs: list):
        """The session a device run uses: for an inference graph with a dynamic batch, one
        per batch size (the last ``BATCH_SESSIONS`` sizes). ONNX Runtime's CUDA convolutions
        keep the cuDNN plan of the last input shape only, so calls alternating between two
        batch sizes on one session plan again at every call (hundreds of milliseconds for
        MobileNetV2 on an H200, 2.5 ms with a session per shape)."""
        if self.training or not self.dynamic_batch or not inputs or not inputs[0].ndim:
            return self.session
        if self._batch_sessions is None:  # the session the engine choice kept is the first size's
            self._batch_sessions = SessionPool(self.session, lambda: self._session(self.model, self.engine_options()),
                                               keep=BATCH_SESSIONS)
        return self._batch_sessions.get(inputs[0].shape[0])

    def _run_on_device(self, inputs: list) -> list[Tensor]:
        """The run on the CUDA provider: every array stays on the device, bound by address
        (inputs, the ping-pong state buffers, outputs). The same code binds CPU memory
        where the graph's device is the CPU (how the tests without a GPU run it)."""
        state, device = self.traced.state, self.device
        if not self.training and _versions(state, self.update_names) != self.versions:
            self._build_session()
        xp, kind, index = array_module(device), device.type, device.index or 0
        session = self._device_session(inputs)
        binding = session.io_binding()
        fed = [(v.name, _on_device(t._eager_data("nn.Graph input"), device)) for v, t in zip(self.traced.ir.inputs, inputs)]
        for name in self.fed_state:
            feed = self.traced.system_feeds.get(name)
            fed.append((name, _on_device(feed() if feed is not None else state[name]._data, device)))
        self._runs += 1
        for name, array in fed:  # ``fed`` keeps every bound array alive until the run is over
            binding.bind_input(name, kind, index, array.dtype.type, list(array.shape), _address(array))
        new_state = {}
        for name in self.update_names:
            pair, i = self._state_target(name, device)
            target = new_state[name] = pair.arrays[i]
            binding.bind_output(name + ":new", kind, index, target.dtype.type, list(target.shape), _address(target))
        outs = []
        for v, shape in zip(self.traced.ir.outputs, self._output_shapes(inputs)):
            if shape is None:  # a size the run decides: ONNX Runtime allocates it
                binding.bind_output(v.name, kind, index)
                outs.append(None)
                continue
            out = xp.empty(shape, dtype=_np_dtype(dtypes.session_dtype(v.dtype)))
            binding.bind_output(v.name, kind, index, out.dtype.type, list(out.shape), _address(out))
            outs.append(out)
        if kind == "cuda":  # eager work queued on CuPy's stream is done before ONNX Runtime's stream reads
            xp.cuda.get_current_stream().synchronize()
        session.run_with_iobinding(binding)
        binding.synchronize_outputs()
        del fed
        if any(out is None for out in outs):
            values = binding.get_outputs()
            outs = [out if out is not None else _from_ort_value(values[i], xp) for i, out in enumerate(outs)]
        for name, array in new_state.items():
            target = state[name]
            target._set_value(array if target.device == device else to_device_array(array, target.device))
        out_device = inputs[0].device if inputs else device
        return [Tensor._wrap(to_device_array(_device_ir_dtype(out, v.dtype), out_device), out_device)
                for out, v in zip(outs, self.traced.ir.outputs)]

    def _bind_state_outputs(self, binding) -> dict:
        """Bind each updated state's output to the buffer its tensor does not hold now."""
        new = {}
        for name in self.update_names:
            pair, i = self._state_target(name, CPU)
            new[name] = pair.arrays[i]
            binding.bind_ortvalue_output(name + ":new", pair.values[i])
        return new

    def _state_target(self, name: str, device: Device) -> tuple:
        """Where the run writes the new value of state ``name``: ``(pair, index)`` of the
        buffer of its pair on ``device`` that its tensor does not hold now (a new pair
        where the tensor holds an array of none: a first call, or ``p.data = ...``)."""
        current = self.traced.state[name]._data
        pair = self._buffers.get(name)
        if pair is None or not pair.holds(current):
            pair = self._buffers[name] = StatePair(current, array_module(device))
        return pair, pair.target(current)

    def _bind_user_outputs(self, binding, inputs) -> list:
        """Output buffers for this call: one of ``outputs_buffer_size`` sets, reused while
        the shapes stay the same (outputs are copied out after the run)."""
        shapes = self._output_shapes(inputs)
        size = self.options.get("outputs_buffer_size", 2)
        if len(self._out_ring) != size or any(s is None for s in shapes):
            self._out_ring = [None] * size
        self._out_index = (self._out_index + 1) % size
        ring = self._out_ring[self._out_index]
        if ring is None or [a.shape for a in ring[0]] != shapes or any(s is None for s in shapes):
            arrays = [np.empty(s, dtype=_np_dtype(dtypes.session_dtype(v.dtype))) if s is not None else None
                      for s, v in zip(shapes, self.traced.ir.outputs)]
            ring = self._out_ring[self._out_index] = (arrays, [None if a is None else runtime.ort_value(a)
                                                               for a in arrays])
        arrays, values = ring
        for v, value in zip(self.traced.ir.outputs, values):
            if value is None:
                binding.bind_output(v.name)
            else:
                binding.bind_ortvalue_output(v.name, value)
        if any(a is None for a in arrays):
            return _Deferred(binding, arrays)
        return arrays

    def _output_shapes(self, inputs) -> list:
        """Output shapes for these inputs: the traced ones, dim 0 following the batch."""
        batch = inputs[0].shape[0] if inputs and inputs[0].ndim else None
        as_traced = all(tuple(t.shape) == tuple(v.shape) for t, v in zip(inputs, self.traced.ir.inputs))
        shapes = []
        for v in self.traced.ir.outputs:
            shape = tuple(v.shape)
            if v.name in self.dynamic_dims and not as_traced:
                shapes.append(None)  # a named dim's size: the runtime sizes it
                continue
            if self.dynamic_batch and self.batch is not None and shape and shape[0] == self.batch:
                if batch != self.batch:
                    shapes.append(None)  # let the runtime size it
                    continue
            shapes.append(shape)
        return shapes


class _Deferred(list):
    """Outputs some of which the runtime allocates: fetched after the run."""

    def __init__(self, binding, arrays):
        super().__init__()
        self.binding, self.arrays = binding, arrays

    def __iter__(self):
        fetched = self.binding.copy_outputs_to_cpu()
        return iter([a if a is not None else fetched[i] for i, a in enumerate(self.arrays)])


_NO_KERNEL = re.compile(r"Could not find an implementation for (\w+)\(\d+\) node with name '([^']*)'")


def _missing_kernel(exc: Exception, ir) -> str | None:
    """One line for ONNX Runtime's ``NOT_IMPLEMENTED`` (an operator without a kernel for
    these dtypes), naming the operator, the node and its dtype; None for other errors."""
    found = _NO_KERNEL.search(str(exc))
    if found is None:
        return None
    op, node = found.groups()
    value = ir.values.get(node)
    dtype = f" in {value.dtype}" if value is not None else ""
    return (f"nn.Graph {ir.name}: ONNX Runtime has no {op} kernel{dtype} (node {node!r}); this op cannot run "
            f"in a graph in that dtype (run it eagerly, or in a dtype ONNX Runtime supports)")


def _np_dtype(name: str):
    return dtypes.from_name(name).np


def _as_ir_dtype(out: np.ndarray, name: str, copy: bool = True) -> np.ndarray:
    """The session's output in the IR's dtype (bfloat16 outputs come as float32): a copy,
    unless ``copy`` is False (an output the runtime allocated for this call alone)."""
    want = _np_dtype(name)
    if out.dtype != want:
        return out.astype(want)
    return out.copy() if copy else out


def _graph_device(state: dict, inputs_device: str) -> Device:
    """Where a graph runs: the GPU where any of its state tensors (parameters, buffers,
    optimizer state) is, else the CPU; a graph without state runs where its inputs are.
    (A CPU tensor among a GPU graph's state, such as a step counter, is copied each call.)"""
    devices = {t.device for t in state.values()}
    gpus = sorted((d for d in devices if d.type == "cuda"), key=lambda d: d.index)
    if gpus:
        return gpus[0]
    return Device("cpu") if devices else Device(inputs_device)


def _on_device(array, device: Device):
    """``array`` as a C-contiguous array on ``device`` (copied only where it is not)."""
    array = to_device_array(array, device)
    xp = array_module(device)
    return array if array.flags.c_contiguous else xp.ascontiguousarray(array)


def _address(array) -> int:
    """The address of an array's first element (numpy, or CuPy on a GPU)."""
    return array.ctypes.data if isinstance(array, np.ndarray) else array.data.ptr


def _from_ort_value(value, xp):
    """A copy, in ``xp``'s memory, of an OrtValue ONNX Runtime allocated (on the GPU for CuPy)."""
    if xp is np:
        return value.numpy().copy()
    cupy = xp
    dtype = np.dtype(_ORT_TYPES[value.data_type()])
    shape = tuple(value.shape())
    size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    memory = cupy.cuda.UnownedMemory(value.data_ptr(), size, value)
    return cupy.ndarray(shape, dtype, cupy.cuda.MemoryPointer(memory, 0)).copy()


_ORT_TYPES = MappingProxyType({"tensor(float)": "float32", "tensor(double)": "float64", "tensor(float16)": "float16",
                               "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int8)": "int8",
                               "tensor(uint8)": "uint8", "tensor(bool)": "bool", "tensor(int16)": "int16"})


def _device_ir_dtype(out, name: str):
    """A session output in the IR's dtype (CuPy has no bfloat16: on the GPU such an output
    stays float32, which holds it exactly)."""
    want = _np_dtype(name)
    if out.dtype == want or (name == "bfloat16" and not isinstance(out, np.ndarray)):
        return out
    return out.astype(want)


def _host(t: Tensor) -> np.ndarray:
    if t._lazy is not None:
        raise GraphError("a lazy tensor was passed to a compiled graph")
    data = t.numpy()
    return data if data.flags.c_contiguous else np.ascontiguousarray(data)
