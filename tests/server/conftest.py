"""Fixtures: real servers (uvicorn, and grpcio's server for gRPC) on free loopback ports."""

from __future__ import annotations

import contextlib

import onnx
import pytest

from flowserve.server import InferenceServer, ServerSettings

from .models import mlp, write_repository


@contextlib.contextmanager
def running_server(model_path, **options):
    """A started ``InferenceServer`` on 127.0.0.1 with free HTTP and gRPC ports."""
    settings = ServerSettings(model_path=str(model_path), host="127.0.0.1", http_port=0,
                              grpc_port=0, log_level="warning", **options)
    with InferenceServer(settings).background() as server:
        yield server


@pytest.fixture(scope="session")
def repository(tmp_path_factory):
    return write_repository(tmp_path_factory.mktemp("repo"))


@pytest.fixture(scope="session")
def repo_server(repository):
    """Serves the test repository with model control allowed."""
    with running_server(repository, allow_model_control=True) as server:
        yield server


@pytest.fixture(scope="session")
def mlp_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("single") / "tiny.onnx"
    onnx.save(mlp((4, 8, 3), seed=7), path)
    return path


@pytest.fixture(scope="session")
def mlp_server(mlp_file):
    """Serves one .onnx file (model name ``tiny``)."""
    with running_server(mlp_file) as server:
        yield server
