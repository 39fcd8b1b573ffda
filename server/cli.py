"""``flowserve serve PATH``: serve a saved graph, an ``.onnx`` file or a repository."""

from __future__ import annotations

from typing import Optional

import typer

from flowserve.errors import FlowserveError


def serve(
    path: str = typer.Argument(
        ..., help="Saved graph directory, .onnx file, or model repository (repo/<model>/<version>/)."
    ),
    host: str = typer.Option("127.0.0.1", help="Address to listen on (HTTP and gRPC)."),
    http_port: int = typer.Option(8000, help="HTTP port (0: any free port)."),
    grpc_port: int = typer.Option(8001, help="gRPC port (0: any free port)."),
    no_grpc: bool = typer.Option(False, "--no-grpc", help="Do not start the gRPC front end."),
    model_name: Optional[str] = typer.Option(
        None, help="Serve a single saved directory or .onnx file under this name."
    ),
    device: str = typer.Option("auto", help="auto (CUDA when usable), cpu, or cuda."),
    cudnn_benchmark: bool = typer.Option(
        False, "--cudnn-benchmark", help="On CUDA, time cuDNN's convolution algorithms per input shape "
                                         "and keep the fastest (as torch.backends.cudnn.benchmark)."
    ),
    provider: str = typer.Option(
        "onnxruntime", help='onnxruntime (CUDA when usable, else the CPU), cpu, cuda, tensorrt (fp16, '
                            'engines cached; pip install "flowserve[tensorrt]"), openvino (CPU; pip install '
                            '"flowserve[openvino]"), or auto (tensorrt where usable, else onnxruntime).'
    ),
    max_batch_size: int = typer.Option(
        64, help="Largest batch the dynamic batcher forms (0: no batching); config.json overrides."
    ),
    max_queue_delay_us: int = typer.Option(
        0, help="Microseconds a request may wait for its batch to fill; config.json overrides."
    ),
    max_queue_size: int = typer.Option(
        1024, help="Queued requests per model before 503 / UNAVAILABLE."
    ),
    instances: Optional[int] = typer.Option(
        None, help="ONNX Runtime sessions per model, run in parallel (unset: one, or those of "
                   "--cpu-policy; setting it fixes the sessions)."
    ),
    intra_op_threads: int = typer.Option(
        0, help="ONNX Runtime threads per session (0: cores divided by instances, or one for "
                "a model whose runs are short, measured at load)."
    ),
    cpu_policy: str = typer.Option(
        "auto", help="How a CPU model's sessions share the cores: wide-narrow (one session on "
                     "every core for a lone request, one single-threaded session per core under "
                     "load), fixed (--instances x --intra-op-threads), or auto (wide-narrow for "
                     "a model whose runs are long, unless --instances or --intra-op-threads is set)."
    ),
    skip_verify: bool = typer.Option(
        False, "--skip-verify",
        help="UNSAFE: serve models without checking that they reproduce their reference examples.",
    ),
    require_verified: bool = typer.Option(
        False, "--require-verified",
        help="Refuse (UNAVAILABLE) models without reference examples to verify them on.",
    ),
    allow_model_control: bool = typer.Option(
        False, help="Accept repository load/unload requests (only models inside PATH)."
    ),
    model_control_sync_timeout: float = typer.Option(
        300.0, help="Seconds a load/unload request waits for the other --workers processes to "
                    "follow it before it is answered."
    ),
    auth_token: Optional[str] = typer.Option(
        None, envvar="FLOWSERVE_AUTH_TOKEN",
        help="Require 'Authorization: Bearer TOKEN' on every request but health checks.",
    ),
    max_request_bytes: int = typer.Option(
        64 * 1024 * 1024, help="Largest request body accepted (413 / RESOURCE_EXHAUSTED beyond)."
    ),
    max_header_bytes: int = typer.Option(
        64 * 1024, help="Largest request line plus headers accepted (431 beyond)."
    ),
    header_timeout: float = typer.Option(
        10.0, help="Seconds a connection may take to send a request's headers, or to finish a TLS "
        "handshake (then closed)."
    ),
    body_idle_timeout: float = typer.Option(
        10.0, help="Seconds a request body may go without a byte (408, then closed)."
    ),
    body_timeout: float = typer.Option(
        60.0, help="Seconds a request body may take after its headers (408, then closed)."
    ),
    max_preallocated_body_bytes: int = typer.Option(
        256 * 1024 * 1024, help="Most bytes allocated ahead of their data for large binary "
        "infer bodies, all connections together (beyond it, bodies grow as they arrive)."
    ),
    max_bytes_elements: int = typer.Option(
        1 << 20, help="Most BYTES elements one request may carry (400 / INVALID_ARGUMENT beyond)."
    ),
    max_json_elements: int = typer.Option(
        1 << 24, help="Most values one JSON request body may hold (413 beyond)."
    ),
    http_infer_response_compression_level: str = typer.Option(
        "low", help="none, low, medium or high: zlib level of infer answers of 1 KiB or more to "
                    "HTTP clients whose Accept-Encoding asks for gzip or deflate (none: never)."
    ),
    grpc_infer_response_compression_level: str = typer.Option(
        "none", help="none, low, medium or high: grpc-core's compression level of answers to gRPC "
                     "clients that accept gzip or deflate (as Triton's option; none: never)."
    ),
    grpc_message_timeout: float = typer.Option(
        60.0, help="Seconds a unary gRPC call may take to send its whole request message once "
                   "its headers are in (DEADLINE_EXCEEDED beyond)."
    ),
    grpc_compression: str = typer.Option(
        "identity", help="identity or gzip: compressed gRPC request messages accepted (identity: "
                         "refused, UNIMPLEMENTED; gzip: gzip and deflate, inflated up to "
                         "--max-request-bytes, for trusted clients)."
    ),
    grpc_receive_buffer_bytes: int = typer.Option(
        128 * 1024 * 1024, help="Bytes of gRPC request messages received at once, all "
        "connections together, each counted as --max-request-bytes while it arrives (beyond, "
        "a call waits for room)."
    ),
    grpc_receive_window_bytes: int = typer.Option(
        64 * 1024, help="HTTP/2 window of a gRPC request stream before its message is read, "
        "and of each connection beyond the messages being read: what each waiting call can "
        "pin, and about how much of its messages a connection carries at once (4 MiB: faster "
        "large messages from trusted clients)."
    ),
    grpc_receive_stall_timeout: float = typer.Option(
        1.0, help="Seconds a gRPC request message may hold its room while still arriving and "
                  "other calls wait (RESOURCE_EXHAUSTED beyond)."
    ),
    log_level: str = typer.Option("info", help="debug, info, warning or error (JSON lines)."),
    workers: int = typer.Option(
        1, help="Server processes sharing the HTTP and gRPC ports (SO_REUSEPORT); each loads "
                "the models; metrics add up across them."
    ),
    grpc_workers: Optional[int] = typer.Option(
        None, help="How many of the --workers processes also serve gRPC (default: all)."
    ),
    worker_restarts_per_minute: int = typer.Option(
        5, help="Dead --workers processes restarted per minute; one more death stops the server "
                "(exit status 1; 0: the first death does)."
    ),
    allow_client_shm: bool = typer.Option(
        False, help="Let clients on this machine register system shared-memory regions and pass "
                    "tensors through them (Triton's extension; only for trusted local clients)."
    ),
    ssl_certfile: Optional[str] = typer.Option(
        None, envvar="FLOWSERVE_SSL_CERTFILE",
        help="PEM certificate chain: serve HTTPS, and gRPC over TLS, on both ports.",
    ),
    ssl_keyfile: Optional[str] = typer.Option(
        None, envvar="FLOWSERVE_SSL_KEYFILE",
        help="PEM private key of --ssl-certfile (when the certificate file lacks it).",
    ),
    ssl_ca_certs: Optional[str] = typer.Option(
        None, envvar="FLOWSERVE_SSL_CA_CERTS",
        help="PEM CA certificates: clients must present a certificate they signed (mutual TLS).",
    ),
) -> None:
    """Serve models over the Open Inference Protocol (HTTP and gRPC) with dynamic batching."""
    from .app import InferenceServer  # local: `flowserve --help` loads this module; the command's stack loads when it runs
    from .logs import configure_logging  # local: as above
    from .settings import ServerSettings  # local: as above
    from .workers import WorkerPool  # local: as above

    try:
        settings = ServerSettings(
            model_path=path, host=host, http_port=http_port,
            grpc_port=None if no_grpc else grpc_port, model_name=model_name, device=device,
            cudnn_benchmark=cudnn_benchmark, provider=provider,
            max_batch_size=max_batch_size, max_queue_delay_us=max_queue_delay_us,
            max_queue_size=max_queue_size, instances=instances, skip_verify=skip_verify,
            require_verified=require_verified, worker_restarts_per_minute=worker_restarts_per_minute,
            intra_op_threads=intra_op_threads, cpu_policy=cpu_policy,
            allow_model_control=allow_model_control,
            model_control_sync_timeout_s=model_control_sync_timeout, auth_token=auth_token,
            max_request_bytes=max_request_bytes, max_header_bytes=max_header_bytes,
            header_timeout_s=header_timeout, body_idle_timeout_s=body_idle_timeout,
            body_timeout_s=body_timeout, max_preallocated_body_bytes=max_preallocated_body_bytes,
            max_bytes_elements=max_bytes_elements,
            max_json_elements=max_json_elements, log_level=log_level, workers=workers,
            grpc_workers=grpc_workers, allow_client_shm=allow_client_shm,
            ssl_certfile=ssl_certfile, ssl_keyfile=ssl_keyfile,
            ssl_ca_certs=ssl_ca_certs,
            http_infer_response_compression_level=http_infer_response_compression_level,
            grpc_infer_response_compression_level=grpc_infer_response_compression_level,
            grpc_message_timeout_s=grpc_message_timeout, grpc_compression=grpc_compression,
            grpc_receive_buffer_bytes=grpc_receive_buffer_bytes,
            grpc_receive_stall_timeout_s=grpc_receive_stall_timeout,
            grpc_receive_window_bytes=grpc_receive_window_bytes,
        )
    except ValueError as exc:  # pydantic's ValidationError: name the option
        first = exc.errors()[0] if hasattr(exc, "errors") else {"loc": ("?",), "msg": str(exc)}
        option = "--" + str(first["loc"][0]).replace("_", "-").removesuffix("-s")
        typer.echo(f"error: {option}: {first['msg']}", err=True)
        raise typer.Exit(2) from None
    configure_logging(settings.log_level)
    if skip_verify:
        typer.echo("WARNING: --skip-verify: models are served WITHOUT verifying them on their reference "
                   "examples; a damaged or wrong model will answer with wrong numbers", err=True)
    try:
        if settings.workers > 1:
            raise typer.Exit(WorkerPool(settings).run())
        InferenceServer(settings).run()
    except FlowserveError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
