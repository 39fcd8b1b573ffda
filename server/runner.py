"""One model instance's ONNX Runtime session and its batch run.

Sessions and the execution provider come from the backend's provider table,
``flowserve.onnx_backend.providers`` (CUDA detection from ``flowserve.onnx_backend.runtime``). ``OrtRunner`` owns one session (one model instance),
converts at the boundary (bfloat16, strings) and runs a dict of arrays::

    runner = OrtRunner(model_proto, device="cpu")
    outputs = runner.run({"x": np.ones((1, 4), np.float32)})
"""

from __future__ import annotations

import threading

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from flowserve.errors import DeviceError, GraphError
from flowserve.onnx_backend import providers
from flowserve.onnx_backend.session_pool import SessionPool

from .errors import InferenceFailedError, ModelLoadError
from .loading import external_tensor_names


def widen_bfloat16_io(model: onnx.ModelProto) -> tuple[onnx.ModelProto, set[str], set[str]]:
    """Copy of ``model`` whose bfloat16 inputs/outputs are float32 (exact casts).

    onnxruntime's Python API has no numpy bfloat16; float32 holds every bfloat16
    value exactly, so the server converts at the boundary without changing bits.
    Returns the model and the names of the widened inputs and outputs.
    """
    graph = model.graph
    bf16_inputs = [v for v in graph.input if v.type.tensor_type.elem_type == TensorProto.BFLOAT16]
    bf16_outputs = [v for v in graph.output if v.type.tensor_type.elem_type == TensorProto.BFLOAT16]
    if not bf16_inputs and not bf16_outputs:
        return model, set(), set()
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    casts_in, casts_out = [], []
    for value in graph.input:
        if value.type.tensor_type.elem_type == TensorProto.BFLOAT16:
            inner = f"{value.name}__bf16"
            _rename_uses(graph, value.name, inner)
            casts_in.append(helper.make_node("Cast", [value.name], [inner], to=TensorProto.BFLOAT16))
            value.type.tensor_type.elem_type = TensorProto.FLOAT
    for value in graph.output:
        if value.type.tensor_type.elem_type == TensorProto.BFLOAT16:
            inner = f"{value.name}__bf16"
            _rename_producers(graph, value.name, inner)
            casts_out.append(helper.make_node("Cast", [inner], [value.name], to=TensorProto.FLOAT))
            value.type.tensor_type.elem_type = TensorProto.FLOAT
    nodes = casts_in + list(graph.node) + casts_out
    del graph.node[:]
    graph.node.extend(nodes)
    return model, {v.name for v in bf16_inputs}, {v.name for v in bf16_outputs}


def _rename_uses(graph: onnx.GraphProto, old: str, new: str) -> None:
    for node in graph.node:
        node.input[:] = [new if name == old else name for name in node.input]
    for value in graph.output:
        if value.name == old:  # an input passed straight through
            graph.node.append(helper.make_node("Identity", [new], [old]))


def _rename_producers(graph: onnx.GraphProto, old: str, new: str) -> None:
    for node in graph.node:
        node.output[:] = [new if name == old else name for name in node.output]
        node.input[:] = [new if name == old else name for name in node.input]


class OrtRunner:
    """One ONNX Runtime session of a model: an instance the batcher runs batches on."""

    def __init__(self, model: onnx.ModelProto, device: str = "auto", instances: int = 1,
                 intra_op_threads: int = 0, provider: str = "onnxruntime", cudnn_benchmark: bool = False,
                 max_batch_size: int = 0):
        external = external_tensor_names(model)
        if external:  # onnxruntime would resolve them against the working directory
            raise ModelLoadError(f"tensors {external[:5]} reference external files; load the "
                                 "model with loading.load_onnx_file, which inlines them")
        model, self._bf16_inputs, self._bf16_outputs = widen_bfloat16_io(model)
        new_session = _session_maker(model, provider, device, instances, intra_op_threads,
                                     cudnn_benchmark, max_batch_size)
        try:
            self._session = new_session()
        except (GraphError, DeviceError) as exc:  # OpenVINO not installed, CUDA not starting: one line
            raise ModelLoadError(str(exc)) from None
        except Exception as exc:  # onnxruntime raises its own classes, all with a message
            raise ModelLoadError(f"onnxruntime could not load the model: {exc}") from None
        self.providers = self._session.get_providers()  # names, as the session took them
        self.engine = providers.of_session(self._session)  # the entry it runs on (CPU where CUDA fell back)
        self.intra_op_threads = (self._session.get_session_options().intra_op_num_threads
                                 if hasattr(self._session, "get_session_options") else 0)
        self._string_inputs = {
            i.name for i in self._session.get_inputs() if i.type == "tensor(string)"
        }
        self._string_outputs = {
            o.name for o in self._session.get_outputs() if o.type == "tensor(string)"
        }
        self.output_names = [o.name for o in self._session.get_outputs()]
        self._converts_inputs = bool(self._bf16_inputs or self._string_inputs)
        self._converts_outputs = bool(self._bf16_outputs or self._string_outputs)
        self._device_io = None
        if self.device == "cuda" and not (self._string_inputs or self._string_outputs):
            per_shape = self.engine.session_per_shape and max_batch_size
            self._device_io = DeviceIO(self._session, self.output_names,
                                       buckets=batch_buckets(max_batch_size) if per_shape else (),
                                       new_session=new_session)

    @property
    def batch_buckets(self) -> tuple:
        """The batch sizes a batch is padded up to before it runs (on CUDA), else ()."""
        return self._device_io.buckets if self._device_io is not None else ()

    @property
    def device(self) -> str:
        """``"cuda"`` or ``"cpu"``: where this session runs."""
        return self.engine.device

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the session on ``inputs`` (batch-first arrays) and return all outputs."""
        feed = inputs
        if self._converts_inputs:
            feed = {name: self._to_session(name, array) for name, array in inputs.items()}
        try:
            results = self._device_io.run(feed) if self._device_io is not None \
                else self._session.run(self.output_names, feed)
        except Exception as exc:
            raise InferenceFailedError(f"onnxruntime failed: {exc}") from None
        if not self._converts_outputs:
            return dict(zip(self.output_names, results))
        return {
            name: self._from_session(name, array) for name, array in zip(self.output_names, results)
        }

    def _to_session(self, name: str, array: np.ndarray) -> np.ndarray:
        if name in self._bf16_inputs:
            return array.astype(np.float32)
        if name in self._string_inputs:
            decode = np.vectorize(_as_text, otypes=[object])
            return decode(array) if array.size else array.astype(object)
        return np.asarray(array)

    def _from_session(self, name: str, array: np.ndarray) -> np.ndarray:
        if name in self._bf16_outputs:
            return array.astype(ml_dtypes.bfloat16)
        if name in self._string_outputs and array.size:
            return np.vectorize(_as_bytes, otypes=[object])(array)
        return array


def _session_maker(model: onnx.ModelProto, provider: str, device: str, instances: int, threads: int,
                   cudnn_benchmark: bool, max_batch_size: int):
    """What makes a served model's sessions: the provider table's entry for ``provider``
    on ``device`` with its serving options (TensorRT's profile and caches); one-line
    ``ModelLoadError``s for a provider that is unknown or cannot run here."""
    try:
        entry = providers.for_serving(provider, device)
        extra = entry.serving_options(model, max_batch_size) if entry.serving_options else {}
    except (DeviceError, ValueError, OSError) as exc:  # OSError: the engine cache folder
        raise ModelLoadError(str(exc)) from None
    options = {"cudnn_conv_heuristic_search_algo": not cudnn_benchmark, **extra}
    named = provider not in (providers.AUTO, providers.ONNXRUNTIME)  # asked for: no quiet CPU fallback

    def new_session():
        return providers.create_session(model, device=device, instances=instances, threads=threads,
                                        provider=entry, options=options, required=named)
    return new_session


def batch_buckets(max_batch_size: int) -> tuple:
    """The batch sizes a CUDA session runs: the powers of two below ``max_batch_size``, and
    it. cuDNN plans each new input shape at its first run (tens to hundreds of
    milliseconds per convolution model); a batch padded up to one of these few sizes
    meets a planned shape after warm-up."""
    sizes, size = [], 1
    while size < max_batch_size:
        sizes.append(size)
        size *= 2
    return tuple(sizes + [max_batch_size])


class DeviceIO:
    """A CUDA session's batch run through IO binding, one session per batch size.

    ONNX Runtime's CUDA convolutions keep the cuDNN plan of the last input shape only: a
    session whose calls alternate between two batch sizes plans again at every call
    (MobileNetV2 on an H200: 350-1,100 ms a call, against 2.5 ms with a session per
    shape). So a batch of ``rows`` is padded (rows of zeros) up to the smallest of
    ``buckets`` that holds it, and each bucket runs on a session of its own (made by
    ``new_session`` at its first batch; ``ServedModel.warm_batch_buckets`` makes them at
    load). Rows are independent in a batched model (the batcher merges requests on that
    ground), so the padding changes no real row; the outputs are cut back to ``rows``.
    Each input is copied host->device once into a device buffer kept per shape; outputs
    are allocated by ONNX Runtime's device arena and copied back once each. Runs are
    serialised (the bindings and buffers are this instance's own)."""

    def __init__(self, session, output_names: list[str], device: str = "cuda", buckets: tuple = (),
                 new_session=None):
        self._device = device  # "cuda" (what the server binds), or "cpu"
        self._output_names = output_names
        self.buckets = tuple(sorted(buckets))
        # a session per bucket (without buckets, or ``new_session``, batch sizes share ``session``)
        self._pool = SessionPool(session, new_session, keys=max(1, len(self.buckets)))
        self._lanes: dict = {}  # batch size (None without buckets) -> _Lane
        self._staging: dict = {}  # (name, shape, dtype) -> host array a padded batch is assembled in
        self._lock = threading.Lock()

    @property
    def sessions(self) -> int:
        """Sessions made so far (one per batch size run)."""
        return self._pool.sessions

    def run(self, feed: dict) -> list:
        rows = next(iter(feed.values())).shape[0] if self.buckets and feed else None
        padded = next((b for b in self.buckets if b >= rows), rows) if rows is not None else None
        with self._lock:
            if padded is not None and padded != rows:
                feed = {name: self._pad(name, np.ascontiguousarray(a), padded) for name, a in feed.items()}
            outputs = self._lane(padded).run(feed)
        if padded is not None and padded != rows:
            outputs = [out[:rows] for out in outputs]
        return outputs

    def _lane(self, size):
        lane = self._lanes.get(size)
        if lane is None:
            lane = self._lanes[size] = _Lane(self._pool.get(size), self._device, self._output_names)
        return lane

    def _pad(self, name: str, array: np.ndarray, padded: int) -> np.ndarray:
        shape = (padded,) + array.shape[1:]
        staging = self._staging.get((name, shape, array.dtype))
        if staging is None:
            staging = self._staging[(name, shape, array.dtype)] = np.zeros(shape, array.dtype)
        rows = array.shape[0]
        staging[:rows] = array
        staging[rows:] = 0
        return staging


class _Lane:
    """One session's IO binding: device buffers per input shape, outputs on the device."""

    def __init__(self, session, device: str, output_names: list[str]):
        self.session = session
        self._device = device
        self._binding = session.io_binding()
        self._output_names = output_names
        self._inputs: dict = {}  # (name, shape, dtype) -> OrtValue on the device

    def run(self, feed: dict) -> list:
        binding = self._binding
        for name, array in feed.items():
            array = np.ascontiguousarray(array)
            key = (name, array.shape, array.dtype)
            value = self._inputs.get(key)
            if value is None:
                value = self._inputs[key] = ort.OrtValue.ortvalue_from_shape_and_type(
                    array.shape, array.dtype, self._device, 0)
            value.update_inplace(array)
            binding.bind_ortvalue_input(name, value)
        binding.clear_binding_outputs()
        for name in self._output_names:
            binding.bind_output(name, self._device, 0)
        self.session.run_with_iobinding(binding)
        return binding.copy_outputs_to_cpu()


# onnxruntime's Python API takes and gives strings as UTF-8 text. Bytes that are not UTF-8
# travel as private-use characters U+10FF00 + byte (Plane 16), one per undecodable byte,
# and come back as those bytes: a string model that passes them through returns them.
_ESCAPE_BASE = 0x10FF00
_TO_PRIVATE = {0xDC00 + b: _ESCAPE_BASE + b for b in range(0x80, 0x100)}
_FROM_PRIVATE = {_ESCAPE_BASE + b: 0xDC00 + b for b in range(0x80, 0x100)}


def _as_text(item) -> str:
    if not isinstance(item, bytes):
        return str(item)
    try:
        return item.decode("utf-8")
    except UnicodeDecodeError:
        return item.decode("utf-8", "surrogateescape").translate(_TO_PRIVATE)


def _as_bytes(item) -> bytes:
    if isinstance(item, bytes):
        return item
    text = str(item)
    if text and max(text) >= chr(_ESCAPE_BASE + 0x80):
        return text.translate(_FROM_PRIVATE).encode("utf-8", "surrogateescape")
    return text.encode("utf-8", "replace")
