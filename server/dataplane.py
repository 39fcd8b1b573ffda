"""The one serving core both front ends call: lookup, readiness, inference, stats.

It speaks in numpy arrays and plain dicts; HTTP and gRPC are translations done
by ``http.app`` and ``grpc.app``. Every error it raises is a ``ServerError``
carrying its HTTP status::

    plane = DataPlane(settings)
    await plane.start()
    response = await plane.infer(InferenceRequest("mlp", inputs={"x": x}))
    response.outputs["y"]
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.metadata
import itertools
import json
import logging
import time
from typing import Optional

import numpy as np

from flowserve.protocol.datatypes import TRITON_TYPE_BY_DATATYPE
from flowserve.protocol.tensors import array_to_raw

from .classification import check_classification, classify_outputs
from .control import ModelControl
from .datatypes import OFFLOAD_BYTES, array_from_raw
from .errors import InvalidRequestError, ModelControlDisabledError, RequestTooLargeError, ServerError
from .metrics import ServerMetrics
from .model import ModelStatistics, ServedModel
from .repository import ModelRepository
from .settings import ServerSettings
from .shared_memory import SharedInput, SharedMemoryRegistry

log = logging.getLogger("flowserve.server")

EXTENSIONS = ("binary_tensor_data", "classification", "model_configuration", "model_repository",
              "statistics")
SHARED_MEMORY_EXTENSION = "system_shared_memory"  # listed when --allow-client-shm is on


def server_version() -> str:
    """The installed flowserve version."""
    try:
        return importlib.metadata.version("flowserve")
    except importlib.metadata.PackageNotFoundError:
        return "0.0.0"


@dataclasses.dataclass
class InferenceRequest:
    """A protocol-neutral inference request."""

    model_name: str
    model_version: str = ""
    inputs: dict = dataclasses.field(default_factory=dict)  # name: array, or SharedInput
    outputs: Optional[list] = None  # requested output names; None: all
    id: str = ""
    timeout_s: Optional[float] = None
    classification: dict = dataclasses.field(default_factory=dict)  # output: top classes asked
    shared_outputs: dict = dataclasses.field(default_factory=dict)  # output: SharedTensor to fill


@dataclasses.dataclass
class InferenceResponse:
    """Outputs of one request, in the order the model declares them."""

    model_name: str
    model_version: str
    outputs: dict
    id: str = ""
    datatypes: dict = dataclasses.field(default_factory=dict)
    shared: dict = dataclasses.field(default_factory=dict)  # output: SharedTensor written


def refuse_sequence(sequence_id) -> None:
    """Triton's ``sequence_id`` names a sequence of a stateful model; flowserve serves none,
    so a request that names one is refused rather than answered as if it named none."""
    if sequence_id not in (None, 0, ""):
        raise InvalidRequestError(f"parameters.sequence_id {sequence_id!r:.40}: flowserve serves no "
                                  "stateful (sequence-batched) models; send the request without one")


class DataPlane:
    """Shared core of the HTTP and gRPC front ends."""

    def __init__(self, settings: ServerSettings):
        self.settings = settings
        self.metrics = ServerMetrics(settings.shared_metrics_dir, statistics=self._own_statistics)
        self.repository = ModelRepository(settings, on_batch=self.metrics.batch)
        self.control = ModelControl(self.repository, settings)  # load/unload on every worker
        self.shared_memory = SharedMemoryRegistry(settings.allow_client_shm)
        self._request_ids = itertools.count(1)

    async def start(self) -> None:
        """Load the models (failures are kept in the index, not raised), and unload those
        the other workers of the server have unloaded."""
        await self.control.start()

    async def stop(self) -> None:
        """Let queued requests finish, then release every session."""
        await self.repository.close()
        self.shared_memory.close()

    def live(self) -> bool:
        return True

    def ready(self) -> bool:
        return self.repository.ready

    def server_metadata(self) -> dict:
        extensions = list(EXTENSIONS)
        if self.shared_memory.enabled:
            extensions.append(SHARED_MEMORY_EXTENSION)
        return {"name": "flowserve", "version": server_version(), "extensions": extensions}

    def model_names(self) -> list[str]:
        """Every model the repository holds, ready or not."""
        return self.repository.model_names()

    def knows_model(self, name: str) -> bool:
        return name in self.model_names()

    def model_ready(self, name: str, version: str = "") -> bool:
        return self.repository.find(name, version) is not None

    def model(self, name: str, version: str = "") -> ServedModel:
        """The ready model, or ``ModelNotFoundError``/``ModelNotReadyError``."""
        return self.repository.get(name, version)

    def model_metadata(self, name: str, version: str = "") -> dict:
        model = self.model(name, version)
        return {
            "name": model.name,
            "versions": self.repository.versions(model.name),
            "platform": model.platform,
            "inputs": [_tensor_metadata(s) for s in model.inputs],
            "outputs": [_tensor_metadata(s) for s in model.outputs],
            "parameters": model.parameters,
        }

    def model_config(self, name: str, version: str = "") -> dict:
        """Triton-style model configuration (the ``/config`` extension)."""
        return triton_config(self.model(name, version))

    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        """Run one request through the model's batcher; the response carries the request's
        ``id`` (one is made up when it has none, as MLServer does)."""
        started = time.monotonic()
        request_id = request.id or f"r{next(self._request_ids)}"
        model = self.model(request.model_name, request.model_version)
        try:
            names = model.check_outputs(request.outputs)
            check_classification(request.classification, model.output_datatypes)
            self._check_shared_outputs(request)
            inputs = await self._read_shared_inputs(request.inputs)
            outputs = await model.infer(inputs, request.timeout_s)
            shared = await self._write_shared_outputs(outputs, request.shared_outputs)
        except ServerError as exc:
            self.metrics.request(model.name, model.version, False,
                                 time.monotonic() - started, type(exc).__name__)
            log.info("infer failed", extra={"request_id": request_id, "model": model.name,
                                            "status": exc.status, "error": str(exc)})
            raise
        outputs, datatypes = {n: outputs[n] for n in names}, model.output_datatypes
        if request.classification:
            outputs, datatypes = classify_outputs(outputs, request.classification, datatypes,
                                                  batched=bool(model.max_batch_size))
        self.metrics.request(model.name, model.version, True, time.monotonic() - started)
        return InferenceResponse(model.name, model.version, outputs, request_id, datatypes, shared)

    def _check_shared_outputs(self, request: InferenceRequest) -> None:
        """Before the run: each output asked for in shared memory names a registered region
        it fits in, and is not also asked for as top classes (as Triton refuses)."""
        for name, tensor in request.shared_outputs.items():
            where = f"output {name!r}"
            if name in request.classification:
                raise InvalidRequestError(f"{where}: parameters: shared_memory_region and "
                                          "classification cannot both be set")
            self.shared_memory.check(tensor, where)

    async def _read_shared_inputs(self, inputs: dict) -> dict:
        """``inputs`` with every ``SharedInput`` read from its region (off the event loop
        when large, like a large body)."""
        sizes = [v.tensor.byte_size for v in inputs.values() if isinstance(v, SharedInput)]
        if not sizes:
            return inputs
        limit = self.settings.max_request_bytes
        if sum(sizes) > limit:  # read into memory: bounded as a body is
            raise RequestTooLargeError(f"inputs in shared memory: {sum(sizes)} bytes exceed the "
                                       f"limit of {limit} (--max-request-bytes)")
        if sum(sizes) > OFFLOAD_BYTES:
            return await asyncio.to_thread(self._read_inputs, inputs)
        return self._read_inputs(inputs)

    def _read_inputs(self, inputs: dict) -> dict:
        limit = self.settings.max_bytes_elements
        read = dict(inputs)
        for name, value in inputs.items():
            if isinstance(value, SharedInput):
                where = f"input {name!r}"
                raw = self.shared_memory.read(value.tensor, where)
                read[name] = array_from_raw(raw, value.datatype, value.shape, where, limit)
        return read

    async def _write_shared_outputs(self, outputs: dict, places: dict) -> dict:
        """Write the outputs asked for in shared memory; ``{output: SharedTensor written}``."""
        if not places:
            return {}
        if sum(np.asarray(outputs[n]).nbytes for n in places if n in outputs) > OFFLOAD_BYTES:
            return await asyncio.to_thread(self._write_outputs, outputs, places)
        return self._write_outputs(outputs, places)

    def _write_outputs(self, outputs: dict, places: dict) -> dict:
        return {name: self.shared_memory.write(tensor, array_to_raw(outputs[name]), f"output {name!r}")
                for name, tensor in places.items() if name in outputs}

    def statistics(self, name: str = "", version: str = "") -> dict:
        """Triton's statistics extension: counts and cumulative durations, of every worker
        of a ``--workers N`` server (this one's live counters plus the others' latest
        published ones) for the model versions this worker serves."""
        if name and version:
            models = [self.model(name, version)]
        elif name:
            latest = self.model(name)  # 404 / 503 when absent
            models = [m for m in self.repository.loaded() if m.name == latest.name]
        else:
            models = self.repository.loaded()
        peers = self.metrics.peer_statistics()
        answer = []
        for model in models:
            stats = model.statistics()
            if (model.name, model.version) in peers:
                stats.merge(peers[model.name, model.version])
            answer.append(_model_statistics(model, stats))
        return {"model_stats": answer}

    def _own_statistics(self) -> list:
        """This worker's ``[model, version, statistics]`` rows, as ``metrics.publish``
        shares them with the other workers."""
        return [[m.name, m.version, m.statistics().snapshot()] for m in self.repository.loaded()]

    def repository_index(self, ready_only: bool = False) -> list[dict]:
        rows = self.repository.index()
        return [dataclasses.asdict(r) for r in rows if not ready_only or r.state == "READY"]

    async def load_model(self, name: str, parameters: Optional[dict] = None) -> None:
        """(Re)load ``name`` from the repository, on every worker of the server; ``parameters`` (Triton's ``config`` and
        ``file:`` ones, which would load a model from the request) are refused."""
        self._check_model_control()
        if parameters:
            raise InvalidRequestError(
                "parameters: refused; models load only from files in the repository")
        await self.control.load(name)

    async def unload_model(self, name: str, parameters: Optional[dict] = None) -> None:
        """Unload ``name`` on every worker of the server. ``unload_dependents`` (tritonclient sends it on every unload) is
        the one parameter: flowserve serves no ensembles, so no model has dependents."""
        self._check_model_control()
        parameters = parameters or {}
        unknown = sorted(set(parameters) - {"unload_dependents"})
        if unknown:
            raise InvalidRequestError(f"parameters: unknown {unknown}; unload takes only "
                                      "unload_dependents (true or false)")
        if not isinstance(parameters.get("unload_dependents", False), bool):
            raise InvalidRequestError("parameters.unload_dependents: expected true or false, got "
                                      f"{parameters['unload_dependents']!r}")
        await self.control.unload(name)

    def _check_model_control(self) -> None:
        if not self.settings.allow_model_control:
            raise ModelControlDisabledError(
                "model control is disabled; start the server with --allow-model-control"
            )
        if not self.repository.is_repository:
            raise ModelControlDisabledError("model control needs a model repository folder")


def _tensor_metadata(spec) -> dict:
    return {"name": spec.name, "datatype": spec.datatype, "shape": list(spec.shape)}


def triton_config(model: ServedModel) -> dict:
    """``model``'s configuration in Triton's model_config JSON shape."""
    skip = 1 if model.max_batch_size else 0

    def tensors(specs):
        return [{"name": s.name, "data_type": TRITON_TYPE_BY_DATATYPE[s.datatype],
                 "dims": list(s.shape[skip:])} for s in specs]

    config = model.config
    policy = config.version_policy
    if policy.policy == "all":
        version_policy = {"all": {}}
    elif policy.policy == "specific":
        version_policy = {"specific": {"versions": policy.versions}}
    else:
        version_policy = {"latest": {"num_versions": policy.num_versions}}
    result = {
        "name": model.name,
        "platform": model.platform,
        "backend": "onnxruntime",
        "version_policy": version_policy,
        "max_batch_size": model.max_batch_size,
        "input": tensors(model.inputs),
        "output": tensors(model.outputs),
        "instance_group": _instance_groups(model),
        "default_model_filename": "model.onnx",
    }
    if model.parameters:
        result["parameters"] = config_parameters(model.parameters)
    if model.max_batch_size:
        result["dynamic_batching"] = {
            "preferred_batch_size": config.preferred_batch_size,
            "max_queue_delay_microseconds": config.max_queue_delay_us,
            "default_queue_policy": {"max_queue_size": config.max_queue_size,
                                     "default_timeout_microseconds": config.default_timeout_us},
        }
    return result


def _instance_groups(model: ServedModel) -> list:
    """Triton's instance groups of ``model``: its sessions; under the wide-narrow policy the
    wide session and the narrow ones as two groups."""
    kind = "KIND_GPU" if model.device == "cuda" else "KIND_CPU"
    counts = [1, len(model.runners) - 1] if model.cpu_policy == "wide-narrow" else [len(model.runners)]
    return [{"name": f"{model.name}_{index}", "count": count, "kind": kind}
            for index, count in enumerate(counts)]


def config_parameters(parameters: dict) -> dict:
    """A model's metadata ``parameters`` as Triton's configuration carries them, each value
    written as JSON in a ``string_value`` (``{"verified": {"string_value": "true"}, ...}``):
    KServe's gRPC ``ModelMetadataResponse`` has no parameters, ``ModelConfig`` has."""
    return {name: {"string_value": json.dumps(value, separators=(",", ":"))}
            for name, value in parameters.items()}


def _duration(d) -> dict:
    return {"count": d.count, "ns": d.ns}


def _compute(c) -> dict:
    """Triton's three compute phases of ``ComputeStatistics``, one count for all."""
    return {"compute_input": {"count": c.count, "ns": c.input_ns},
            "compute_infer": {"count": c.count, "ns": c.infer_ns},
            "compute_output": {"count": c.count, "ns": c.output_ns}}


def _model_statistics(model: ServedModel, s: ModelStatistics) -> dict:
    return {
        "name": model.name,
        "version": model.version,
        "last_inference": s.last_inference_ms,
        "inference_count": s.inference_count,
        "execution_count": s.execution_count,
        "inference_stats": {"success": _duration(s.success), "fail": _duration(s.fail),
                            "queue": _duration(s.queue), **_compute(s.compute)},
        "batch_stats": [{"batch_size": rows, **_compute(c)}
                        for rows, c in sorted(s.batches.items())],
    }
