"""Triton Inference Server (through PyTriton) serving ONNX models with onnxruntime.

Each ``NAME=PATH.onnx`` becomes a model: an inference callable running an
``onnxruntime.InferenceSession`` on the batch Triton's dynamic batcher formed (``@batch``).
Run with the Python of a venv holding ``nvidia-pytriton`` and ``onnxruntime`` (README.md)::

    /tmp/venv-pytriton/bin/python bench/peers/pytriton_server.py 8000 8001 mlp=mlp.onnx
"""

from __future__ import annotations

import argparse

import numpy as np
import onnxruntime as ort
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import DEFAULT_PROTECTED_ENDPOINTS, Triton, TritonConfig, TritonSecurityConfig

from onnx_models import session_and_signature


def infer_callable(session: ort.InferenceSession, input_name: str, output_name: str):
    @batch
    def infer(**inputs):
        return {output_name: session.run([output_name], {input_name: inputs[input_name]})[0]}

    return infer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("http_port", type=int)
    parser.add_argument("grpc_port", type=int)
    parser.add_argument("models", nargs="+", help="NAME=PATH.onnx")
    parser.add_argument("--metrics-port", type=int, default=8002)
    parser.add_argument("--workspace", help="folder for Triton's model store (default: a new "
                        "one in PyTriton's cache, removed on a clean exit only)")
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument("--max-queue-delay-us", type=int, default=500)
    args = parser.parse_args()
    config = TritonConfig(http_port=args.http_port, grpc_port=args.grpc_port,
                          metrics_port=args.metrics_port, allow_metrics=False, exit_on_error=True)
    # perf_analyzer reads the statistics endpoint, which PyTriton guards with a token
    security = TritonSecurityConfig(restricted_endpoints=[
        e for e in DEFAULT_PROTECTED_ENDPOINTS if e != "statistics"])
    with Triton(config=config, security_config=security, workspace=args.workspace) as triton:
        for spec in args.models:
            name, path = spec.split("=", 1)
            session, (input_name, in_shape), (output_name, out_shape) = session_and_signature(path)
            triton.bind(
                model_name=name,
                infer_func=infer_callable(session, input_name, output_name),
                inputs=[Tensor(name=input_name, dtype=np.float32, shape=in_shape)],
                outputs=[Tensor(name=output_name, dtype=np.float32, shape=out_shape)],
                config=ModelConfig(max_batch_size=args.max_batch_size, batcher=DynamicBatcher(
                    max_queue_delay_microseconds=args.max_queue_delay_us)),
                strict=False,
            )
        triton.serve()


if __name__ == "__main__":
    main()
