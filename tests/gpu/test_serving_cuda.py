"""Serving on a CUDA GPU: a batch crosses to the device once through IO binding into
reused device buffers, each instance is its own session (its own CUDA stream), and the
answers are the CPU's; the server on ``--device cuda`` answers over HTTP and gRPC."""

from __future__ import annotations

import concurrent.futures

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from flowserve.clients import GRPCClient, HTTPClient
from flowserve.server.runner import OrtRunner
from tests.gpu import needs_ort_cuda
from tests.server.conftest import running_server

pytestmark = [pytest.mark.gpu, needs_ort_cuda]


def _convnet(seed: int = 0) -> onnx.ModelProto:
    """Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm, batch dim symbolic."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3, "w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    fc = numpy_helper.from_array(rng.standard_normal((8, 5)).astype(np.float32), "fc")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]), helper.make_node("MatMul", ["f", "fc"], ["y"])]
    graph = helper.make_graph(nodes, "convnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])], [w, b, fc])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _batch(rows: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, 3, 16, 16)).astype(np.float32)


def _close(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def test_cuda_runner_pads_batches_to_its_buckets_and_matches_the_cpu():
    model = _convnet()
    cpu, gpu = OrtRunner(model, device="cpu"), OrtRunner(model, device="cuda", max_batch_size=8)
    assert gpu.device == "cuda" and gpu.providers[0] == "CUDAExecutionProvider"
    assert gpu.batch_buckets == (1, 2, 4, 8)
    for i, rows in enumerate((4, 4, 7, 1, 3, 4)):  # shapes repeat, change, and come back
        x = _batch(rows, i)
        got = gpu.run({"x": x})["y"]
        assert got.shape == (rows, 5)
        _close(got, cpu.run({"x": x})["y"])
    assert sorted(gpu._device_io._lanes) == [1, 4, 8] and gpu._device_io.sessions == 3  # a session per bucket


def test_cudnn_benchmark_gives_the_same_answers():
    model, x = _convnet(1), _batch(6, 9)
    heuristic = OrtRunner(model, device="cuda").run({"x": x})["y"]
    timed = OrtRunner(model, device="cuda", cudnn_benchmark=True)
    assert timed._session.get_provider_options()["CUDAExecutionProvider"]["cudnn_conv_algo_search"] == "EXHAUSTIVE"
    _close(timed.run({"x": x})["y"], heuristic)


def test_instances_run_in_parallel_on_their_own_sessions():
    """Two threads share two instances (a thread may meet an instance the other one runs:
    its runs are serialised)."""
    model = _convnet(2)
    runners = [OrtRunner(model, device="cuda", instances=2, max_batch_size=8) for _ in range(2)]
    reference = OrtRunner(model, device="cpu")
    batches = [_batch(3 + i % 4, i) for i in range(16)]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda ix: runners[ix[0] % 2].run({"x": ix[1]})["y"], enumerate(batches)))
    for x, y in zip(batches, results):
        _close(y, reference.run({"x": x})["y"])


def test_server_on_cuda_answers_over_http_and_grpc(tmp_path):
    path = tmp_path / "convnet.onnx"
    onnx.save(_convnet(3), path)
    x = _batch(5, 3)
    want = OrtRunner(_convnet(3), device="cpu").run({"x": x})["y"]
    with running_server(path, device="cuda", instances=2) as server:
        http = HTTPClient(server.http_url)
        config = http.model_config("convnet")
        assert config["instance_group"][0]["kind"] == "KIND_GPU"
        for client in (http, GRPCClient(server.grpc_address)):
            _close(client.infer("convnet", {"x": x})["y"], want)
