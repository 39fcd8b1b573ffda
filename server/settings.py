"""Server settings: command-line options, ``FLOWSERVE_*`` environment variables.

Every field is documented; ``flowserve serve --help`` shows the same text. The
per-model fields (batch size, queue delay, instances, device) are defaults for
models whose ``config.json`` does not set them::

    settings = ServerSettings(model_path="repo", http_port=0)
    FLOWSERVE_HTTP_PORT=9000 flowserve serve repo     # same, from the environment
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

CompressionLevel = Literal["none", "low", "medium", "high"]  # compression.LEVELS' names
GrpcRequestEncodings = Literal["identity", "gzip"]  # grpc.app.REQUEST_ENCODINGS' names
CpuPolicy = Literal["auto", "fixed", "wide-narrow"]  # how a model's CPU sessions share the cores
# the execution providers' vocabulary: flowserve.onnx_backend.providers.NAMES (a test holds them equal)
ProviderName = Literal["auto", "onnxruntime", "cpu", "cuda", "tensorrt", "openvino"]


class ServerSettings(BaseSettings):
    """How ``flowserve serve`` listens, loads models and protects itself."""

    model_config = SettingsConfigDict(env_prefix="FLOWSERVE_", extra="forbid")

    model_path: str = Field(
        "", description="Saved graph directory, .onnx file, or model repository to serve."
    )
    host: str = Field("127.0.0.1", description="Address to listen on (HTTP and gRPC).")
    http_port: int = Field(8000, ge=0, le=65535, description="HTTP port (0: any free port).")
    grpc_port: Optional[int] = Field(
        8001, ge=0, le=65535, description="gRPC port (0: any free port, None: no gRPC)."
    )
    model_name: Optional[str] = Field(
        None, description="Name to serve a single saved directory or .onnx file under."
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="Where sessions run: CUDA when usable (auto), cpu, or cuda."
    )
    cudnn_benchmark: bool = Field(
        False, description="On CUDA, time cuDNN's convolution algorithms for each new input shape "
        "and keep the fastest (as torch.backends.cudnn.benchmark; slower first batch of each size) "
        "instead of cuDNN's heuristic choice."
    )
    provider: ProviderName = Field(
        "onnxruntime", description="Engine that runs the models: onnxruntime (ONNX Runtime's best on "
        "`device`: CUDA when usable, else the CPU), cpu, cuda, tensorrt (ONNX Runtime's TensorRT "
        "provider, fp16, engines cached under FLOWSERVE_CACHE_DIR; pip install \"flowserve[tensorrt]\"), "
        "openvino (CPU; pip install \"flowserve[openvino]\"), or auto (tensorrt where usable, else "
        "onnxruntime, with one warning)."
    )
    max_batch_size: int = Field(
        64, ge=0, description="Largest batch the dynamic batcher forms (0: no batching)."
    )
    max_queue_delay_us: int = Field(
        0, ge=0, description="How long a request may wait for a batch to fill, in µs."
    )
    max_queue_size: int = Field(
        1024, ge=1, description="Requests a model's queue holds before refusing with 503."
    )
    default_timeout_us: int = Field(
        0, ge=0, description="Queue timeout of a request without its own, in µs (0: none)."
    )
    instances: Optional[int] = Field(
        None, ge=1, description="Sessions per model run in parallel (unset: one, or the sessions "
        "of --cpu-policy; setting it fixes the sessions)."
    )
    skip_verify: bool = Field(
        False, description="Serve models without verifying them on their reference examples (unsafe)."
    )
    require_verified: bool = Field(
        False, description="Refuse (UNAVAILABLE) models that have no reference examples to verify."
    )
    intra_op_threads: int = Field(
        0, ge=0, description="ONNX Runtime threads per session (0: cores divided by instances, "
        "or one for a model whose runs are short, measured at load; config.json can override)."
    )
    cpu_policy: CpuPolicy = Field(
        "auto", description="How a CPU ONNX Runtime model's sessions share the cores: wide-narrow "
        "(one session on every core for a lone request, one single-threaded session per core "
        "under load), fixed (--instances sessions of --intra-op-threads threads), or auto "
        "(wide-narrow for a model whose runs are long, unless --instances or --intra-op-threads "
        "is set; config.json can override)."
    )
    allow_model_control: bool = Field(
        False, description="Allow repository load/unload requests (never outside the repo)."
    )
    model_control_sync_timeout_s: float = Field(
        300.0, gt=0, description="Seconds a load/unload request waits for the other workers of "
        "--workers N to follow it before it answers."
    )
    auth_token: Optional[str] = Field(
        None, description="Bearer token every request but health checks must carry."
    )
    max_request_bytes: int = Field(
        64 * 1024 * 1024, ge=1, description="Largest request body accepted (413 beyond)."
    )
    max_header_bytes: int = Field(
        64 * 1024, ge=1024, description="Largest request line plus headers accepted (431 beyond)."
    )
    header_timeout_s: float = Field(
        10.0, gt=0,
        description="Seconds a connection may take to send a request's headers, or to finish a TLS handshake."
    )
    body_idle_timeout_s: float = Field(
        10.0, gt=0, description="Seconds a request body may go without a byte (408, then closed)."
    )
    body_timeout_s: float = Field(
        60.0, gt=0, description="Seconds a request body may take after its headers (408, then closed)."
    )
    max_preallocated_body_bytes: int = Field(
        256 * 1024 * 1024, ge=0, description="Most bytes allocated ahead of their data for large "
        "binary infer bodies, all connections together; beyond it a body grows as it arrives."
    )
    max_bytes_elements: int = Field(
        1 << 20, ge=1, description="Most BYTES elements one request may carry (400 beyond)."
    )
    max_json_elements: int = Field(
        1 << 24, ge=1, description="Most values a JSON request body may hold (413 beyond)."
    )
    http_infer_response_compression_level: CompressionLevel = Field(
        "low", description="zlib level of infer answers of 1 KiB or more to HTTP clients whose "
        "Accept-Encoding asks for gzip or deflate (none: never compress)."
    )
    grpc_infer_response_compression_level: CompressionLevel = Field(
        "none", description="grpc-core's compression level of answers to gRPC clients that accept "
        "gzip or deflate (Triton's option; none: never compress)."
    )
    grpc_message_timeout_s: float = Field(
        60.0, gt=0, description="Seconds a unary gRPC call may take to send its whole request "
        "message once its headers are in (DEADLINE_EXCEEDED beyond)."
    )
    grpc_compression: GrpcRequestEncodings = Field(
        "identity", description="Compressed gRPC request messages accepted: identity (none: a "
        "compressed message is refused before it is read, UNIMPLEMENTED) or gzip (gzip and "
        "deflate, inflated up to --max-request-bytes: 64 KiB on the wire can cost 64 MiB and "
        "its CPU, so for trusted clients). Answers follow "
        "--grpc-infer-response-compression-level either way."
    )
    grpc_receive_buffer_bytes: int = Field(
        128 * 1024 * 1024, ge=1, description="Bytes of gRPC request messages received at once, "
        "all connections together, each unary call's counted as --max-request-bytes (the most "
        "it can pin) while it arrives; beyond, a call waits for room (one message at least)."
    )
    grpc_receive_window_bytes: int = Field(
        64 * 1024, ge=65535, le=(1 << 31) - 1, description="HTTP/2 flow-control window of a "
        "gRPC request stream before its message is read (grpc.http2.lookahead_bytes, BDP "
        "probing off), which grpc-core also makes the connection's window beyond the messages "
        "being read: each open call can pin this much while it waits, and a connection carries "
        "about this much of its calls' messages at once. 4 MiB sends several images at once "
        "(for trusted clients: 100 half-sent calls pin 4 MiB each)."
    )
    grpc_receive_stall_timeout_s: float = Field(
        1.0, gt=0, description="Seconds a gRPC request message may hold its room while it is "
        "still arriving and other calls wait for room (RESOURCE_EXHAUSTED beyond)."
    )
    graceful_timeout_s: float = Field(
        10.0, ge=0, description="Seconds shutdown waits for in-flight requests."
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="Log level of the server's structured logs."
    )
    workers: int = Field(
        1, ge=1, description="Server processes sharing the HTTP port (SO_REUSEPORT)."
    )
    grpc_workers: Optional[int] = Field(
        None, ge=1, description="How many of the workers also serve gRPC (None: all)."
    )
    worker_restarts_per_minute: int = Field(
        5, ge=0, description="Dead workers restarted within any minute; one more death stops "
        "the server with exit status 1 (0: the first death does)."
    )
    allow_client_shm: bool = Field(
        False, description="Let clients register system shared-memory regions and pass tensors "
        "through them (Triton's option; trusted local clients only)."
    )
    ssl_certfile: Optional[str] = Field(
        None, description="PEM certificate chain: serve HTTPS and gRPC over TLS on both ports."
    )
    ssl_keyfile: Optional[str] = Field(
        None, description="PEM private key of --ssl-certfile (when the certificate file lacks it)."
    )
    ssl_ca_certs: Optional[str] = Field(
        None, description="PEM CA certificates: clients must present a certificate they signed "
        "(mutual TLS)."
    )
    reuse_port: bool = Field(
        False, description="Bind with SO_REUSEPORT (each worker of --workers N does)."
    )
    shared_metrics_dir: Optional[str] = Field(
        None, description="Folder where the workers of one server share their metrics."
    )

    @field_validator("ssl_keyfile", "ssl_ca_certs")
    @classmethod
    def _with_certificate(cls, value: Optional[str], info: ValidationInfo) -> Optional[str]:
        if value is not None and not info.data.get("ssl_certfile"):
            raise ValueError("needs --ssl-certfile (the server's certificate)")
        return value

    @field_validator("cpu_policy")
    @classmethod
    def _sessions_not_fixed(cls, value: str, info: ValidationInfo) -> str:
        if value == "wide-narrow" and (info.data.get("instances") is not None
                                       or info.data.get("intra_op_threads")):
            raise ValueError("wide-narrow chooses the sessions and their threads itself; "
                             "leave --instances and --intra-op-threads unset, or use fixed")
        return value

    @field_validator("require_verified")
    @classmethod
    def _not_skipped(cls, value: bool, info: ValidationInfo) -> bool:
        if value and info.data.get("skip_verify"):
            raise ValueError("contradicts --skip-verify (verification is required and skipped)")
        return value

    @field_validator("allow_client_shm")
    @classmethod
    def _one_process(cls, value: bool, info: ValidationInfo) -> bool:
        if value and info.data.get("workers", 1) > 1:
            raise ValueError("serves from one process: a region registered with one worker would "
                             "be unknown to the others; use --workers 1")
        return value

    @field_validator("grpc_workers")
    @classmethod
    def _within_workers(cls, value: Optional[int], info: ValidationInfo) -> Optional[int]:
        workers = info.data.get("workers", 1)
        if value is not None and value > workers:
            raise ValueError(f"{value} exceeds --workers ({workers}); each gRPC worker is "
                             "one of the workers")
        return value
