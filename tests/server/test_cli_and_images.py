"""``flowserve serve`` as a process: the images' entrypoint command, help, shutdown."""

from __future__ import annotations

import json
import pathlib
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

DOCKER = pathlib.Path(__file__).resolve().parents[2] / "docker"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def image_command(dockerfile: str) -> list[str]:
    """ENTRYPOINT + CMD of a Dockerfile (exec form)."""
    text = (DOCKER / dockerfile).read_text()
    entry = json.loads(text.split("ENTRYPOINT ", 1)[1].splitlines()[0])
    cmd = json.loads(text.split("\nCMD ", 1)[1].splitlines()[0])
    return entry + cmd


def as_local(command: list[str], models: pathlib.Path, http: int, grpc: int) -> list[str]:
    """The image command on this machine: loopback, free ports, the test repository."""
    replaced = {"/models": str(models), "0.0.0.0": "127.0.0.1", "8000": str(http),
                "8001": str(grpc), "cuda": "auto"}
    command = [replaced.get(part, part) for part in command]
    assert command[:2] == ["flowserve", "serve"]
    # `python -m flowserve.server` is `flowserve serve` without needing the script on PATH
    return [sys.executable, "-m", "flowserve.server"] + command[2:]


def wait_ready(url: str, process: subprocess.Popen, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read()
        try:
            if httpx.get(f"{url}/v2/health/ready", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} not ready in {timeout_s} s")


@pytest.mark.parametrize("dockerfile", ["Dockerfile.cpu", "Dockerfile.gpu"])
def test_image_entrypoint_serves_and_shuts_down_gracefully(dockerfile, repository, tmp_path):
    models = shutil.copytree(repository, tmp_path / "models")
    shutil.rmtree(models / "broken")
    http, grpc = free_port(), free_port()
    command = as_local(image_command(dockerfile), models, http, grpc)
    assert "127.0.0.1" in command
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{http}"
        wait_ready(url, process)
        body = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32",
                            "data": [1, 2, 3, 4]}]}
        assert httpx.post(f"{url}/v2/models/mlp/infer", json=body).status_code == 200
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
        assert '"shutting down' in process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def test_serve_help_documents_every_option():
    import os

    env = {**os.environ, "COLUMNS": "250", "TERM": "dumb", "NO_COLOR": "1"}
    done = subprocess.run([sys.executable, "-m", "flowserve.server", "--help"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0
    for option in ("--host", "--http-port", "--grpc-port", "--model-name", "--device",
                   "--max-batch-size", "--max-queue-delay-us", "--instances",
                   "--allow-model-control", "--auth-token", "--max-request-bytes",
                   "--max-header-bytes", "--header-timeout", "--max-bytes-elements",
                   "--max-json-elements", "--log-level", "--workers", "--grpc-workers",
                   "--worker-restarts-per-minute", "--require-verified", "--grpc-message-timeout",
                   "--cpu-policy"):
        assert option in done.stdout, option


def test_serve_reports_a_missing_path_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "flowserve.server", str(tmp_path / "nope"),
                           "--http-port", "0", "--grpc-port", "0"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "nope: no such file or directory" in done.stderr


def test_single_model_name_override(mlp_file):
    http = free_port()
    command = [sys.executable, "-m", "flowserve.server", str(mlp_file), "--http-port", str(http),
               "--no-grpc", "--model-name", "renamed", "--log-level", "warning"]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        wait_ready(f"http://127.0.0.1:{http}", process)
        assert httpx.get(f"http://127.0.0.1:{http}/v2/models/renamed").status_code == 200
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(30)


def test_shlex_roundtrip_of_kserve_args():
    """The KServe manifest passes the same arguments the images use."""
    text = (DOCKER / "kserve-inferenceservice.yaml").read_text()
    args = text.split("args: [", 1)[1].split("]", 1)[0]
    parts = [p.strip().strip('"') for p in shlex.split(args.replace(",", " "))]
    assert parts[0] == "/mnt/models" and "--http-port" in parts and "--grpc-port" in parts
