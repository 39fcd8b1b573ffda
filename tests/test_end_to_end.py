"""The whole path on loopback: train in graph mode -> flow.save -> `flowserve export` ->
`flowserve serve` in a subprocess -> client -> the eager module's outputs."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request

import numpy as np
import onnxruntime as ort
import pytest

import flowserve as flow
from flowserve.clients import HTTPClient
from flowserve.errors import SavedGraphError
from flowserve.demo import free_port, make_blobs, train, wait_ready

CLI = [sys.executable, "-m", "flowserve.cli"]


def _close(got, ref):
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(ref).max())))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    graph, model = train(60, log=lambda *_: None)
    saved = tmp_path_factory.mktemp("e2e") / "classifier"
    flow.save(graph, saved)
    return saved, model


@pytest.fixture(scope="module")
def server(trained):
    saved, _ = trained
    port = free_port()
    proc = subprocess.Popen(CLI + ["serve", str(saved), "--http-port", str(port), "--no-grpc",
                                   "--model-name", "classifier", "--log-level", "warning"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    client = HTTPClient(f"http://127.0.0.1:{port}")
    try:
        wait_ready(client, proc)
        yield f"http://127.0.0.1:{port}", client
    finally:
        client.close()
        proc.terminate()
        proc.wait(timeout=30)


def test_export_cli_matches_eager(trained, tmp_path):
    saved, model = trained
    out = tmp_path / "classifier.onnx"
    done = subprocess.run(CLI + ["export", str(saved), "-o", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    x, _ = make_blobs(7, seed=3)
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    model.eval()
    _close(session.run(None, {"x": x})[0], model(flow.tensor(x)).numpy())


def test_served_outputs_equal_eager(trained, server):
    _, model = trained
    _, client = server
    x, _ = make_blobs(5, seed=4)
    model.eval()
    expected = model(flow.tensor(x)).numpy()
    _close(client.infer("classifier", {"x": x})["output_0"], expected)
    for i in range(3):
        _close(client.infer("classifier", {"x": x[i:i + 1]})["output_0"], expected[i:i + 1])
    assert client.is_live() and client.is_model_ready("classifier")


def _post(url: str, body: bytes):
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.mark.parametrize("body,needle", [
    (b"{not json", "json"),
    (json.dumps({"inputs": [{"name": "wrong", "shape": [1, 16], "datatype": "FP32", "data": [0.0] * 16}]}).encode(),
     "wrong"),
    (json.dumps({"inputs": [{"name": "x", "shape": [1, 5], "datatype": "FP32", "data": [0.0] * 5}]}).encode(),
     "shape"),
    (json.dumps({"inputs": [{"name": "x", "shape": [1, 16], "datatype": "INT64", "data": [0] * 16}]}).encode(),
     "INT64"),
])
def test_bad_requests_get_400_naming_the_problem(server, body, needle):
    url, client = server
    status, answer = _post(f"{url}/v2/models/classifier/infer", body)
    assert status == 400 and needle.lower() in answer["error"].lower(), answer
    assert client.is_ready()  # and the server keeps serving


def test_unknown_model_is_404(server):
    url, _ = server
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32", "data": [0.0] * 16}]})
    status, answer = _post(f"{url}/v2/models/nope/infer", body.encode())
    assert status == 404 and "nope" in answer["error"]


def test_damaged_directory_gives_one_line_errors(trained, tmp_path):
    import shutil

    saved, _ = trained
    broken = tmp_path / "broken"
    shutil.copytree(saved, broken)
    (broken / "params.safetensors").write_bytes(b"\x00" * 10)
    with pytest.raises(SavedGraphError, match="params.safetensors"):
        flow.load(broken)
    for command in (["export", str(broken), "-o", str(tmp_path / "m.onnx")], ["serve", str(broken), "--no-grpc",
                                                                              "--http-port", str(free_port())]):
        done = subprocess.run(CLI + command, capture_output=True, text=True, timeout=120)
        assert done.returncode != 0
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        assert "params.safetensors" in lines[-1] and "Traceback" not in done.stderr, done.stderr
