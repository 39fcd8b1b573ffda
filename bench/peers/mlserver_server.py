"""MLServer serving ONNX models through the custom runtime of ``mlserver_runtime.py``.

Each ``NAME=PATH.onnx`` becomes a model with adaptive batching on; the settings files are
written under ``--workdir`` and ``mlserver start`` serves that folder. Run with the Python
of a venv holding ``mlserver`` and ``onnxruntime`` (README.md)::

    /tmp/venv-mlserver/bin/python bench/peers/mlserver_server.py 8080 8081 mlp=mlp.onnx \\
        --workdir /tmp/mlserver-models
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

from mlserver.cli import main as mlserver_main

HERE = pathlib.Path(__file__).resolve().parent


def write_settings(workdir: pathlib.Path, args: argparse.Namespace) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "settings.json").write_text(json.dumps({
        "http_port": args.http_port, "grpc_port": args.grpc_port,
        "metrics_port": args.metrics_port, "metrics_endpoint": None,
        "parallel_workers": args.parallel_workers, "debug": False}))
    for spec in args.models:
        name, path = spec.split("=", 1)
        (workdir / name).mkdir(exist_ok=True)
        (workdir / name / "model-settings.json").write_text(json.dumps({
            "name": name, "implementation": "mlserver_runtime.OnnxRuntimeModel",
            "max_batch_size": args.max_batch_size, "max_batch_time": args.max_batch_time_s,
            "parameters": {"uri": str(pathlib.Path(path).resolve())}}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("http_port", type=int)
    parser.add_argument("grpc_port", type=int)
    parser.add_argument("models", nargs="+", help="NAME=PATH.onnx")
    parser.add_argument("--workdir", required=True, type=pathlib.Path)
    parser.add_argument("--metrics-port", type=int, default=0)
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument("--max-batch-time-s", type=float, default=0.0005)
    parser.add_argument("--parallel-workers", type=int, default=1,
                        help="MLServer's inference processes (its default: 1)")
    args = parser.parse_args()
    write_settings(args.workdir, args)
    # the runtime module and its helper are imported by name, here and in MLServer's workers
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
    sys.path.insert(0, str(HERE))
    sys.argv = ["mlserver", "start", str(args.workdir)]
    mlserver_main()


if __name__ == "__main__":
    main()
