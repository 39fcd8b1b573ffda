"""Serving verifies before it is ready: every exported precision of the four reference
models and their saved directories verify and serve; a model with one weight changed
fails verification and never becomes ready; ``skip_verify`` serves it, flagged."""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from flowserve.clients import GRPCClient, HTTPClient
from flowserve.clients.errors import InferenceServerError
from flowserve.exporter.verified import sidecar_path
from flowserve.serialization import read_examples
from tests.deployments import MIN_AGREEMENT, PRECISIONS

from .conftest import running_server

SAVED = str(len(PRECISIONS) + 1)  # the version folder holding the saved directory itself


def _add_version(folder, version, model_path):
    target = folder / version
    target.mkdir(parents=True)
    shutil.copy(model_path, target / "model.onnx")
    shutil.copytree(sidecar_path(model_path), target / "model.examples")


@pytest.fixture(scope="module")
def verified_repo(deployments, tmp_path_factory):
    repo = tmp_path_factory.mktemp("verified_repo")
    for name, (directory, exports) in deployments.items():
        for version, precision in enumerate(PRECISIONS, 1):
            _add_version(repo / name, str(version), exports[precision].path)
        shutil.copytree(directory, repo / name / SAVED)
        (repo / name / "config.json").write_text(json.dumps({"version_policy": {"policy": "all"}}))
    return repo


def _tampered(model_path, out_path):
    """A copy of an exported model with one element of one weight changed: the smallest
    weight matrix (the classifier head of these models), float or int8."""
    model = onnx.load(str(model_path))
    weights = [t for t in model.graph.initializer if len(t.dims) == 2]
    tensor = min(weights, key=lambda t: int(np.prod(t.dims)))
    array = numpy_helper.to_array(tensor).copy()
    if array.dtype.kind == "f":
        array.flat[0] += 0.5 + 2 * abs(array.flat[0])
    else:
        array.flat[0] = np.iinfo(array.dtype).max if array.flat[0] < 0 else np.iinfo(array.dtype).min
    tensor.CopyFrom(numpy_helper.from_array(array, tensor.name))
    onnx.save(model, str(out_path))


def test_every_precision_verifies_and_serves(verified_repo, deployments):
    with running_server(verified_repo) as server:
        http = HTTPClient(server.http_url)
        assert http.is_ready()
        for name, (directory, _) in deployments.items():
            examples = read_examples(directory)
            ref = np.concatenate([b.outputs["output_0"] for b in examples.batches])
            for version, precision in list(enumerate(PRECISIONS, 1)) + [(int(SAVED), "fp32")]:
                metadata = http.model_metadata(name, str(version))
                assert metadata["parameters"]["verified"] is True, (name, version, metadata)
                figures = metadata["parameters"]["verification"]
                assert figures["precision"] == precision and figures["examples"] == examples.rows
                assert figures["top1_agreement"] >= MIN_AGREEMENT
                got = np.concatenate([http.infer(name, b.inputs, version=str(version))["output_0"]
                                      for b in examples.batches])
                assert np.mean(got.argmax(1) == ref.argmax(1)) >= MIN_AGREEMENT
        assert GRPCClient(server.grpc_address).model_metadata("mlp")["name"] == "mlp"


def test_grpc_model_config_carries_the_verification(verified_repo):
    """KServe's gRPC metadata has no parameters; the model configuration carries them as
    Triton's do (JSON in a ``string_value``), over gRPC and HTTP ``/config`` alike, and
    ``tritonclient.grpc`` reads them."""
    import tritonclient.grpc as triton_grpc

    from flowserve.clients.compare import config_parameters

    with running_server(verified_repo) as server:
        http, grpc_client = HTTPClient(server.http_url), GRPCClient(server.grpc_address)
        for version in ("1", str(len(PRECISIONS))):
            expected = http.model_metadata("mlp", version)["parameters"]
            assert expected["verified"] is True
            config = grpc_client.model_config("mlp", version)
            assert config_parameters(config) == expected
            assert config_parameters(http.model_config("mlp", version)) == expected
            triton = triton_grpc.InferenceServerClient(server.grpc_address)
            answer = triton.get_model_config("mlp", version, as_json=True)["config"]
            assert json.loads(answer["parameters"]["verified"]["string_value"]) is True
            figures = json.loads(answer["parameters"]["verification"]["string_value"])
            assert figures == expected["verification"]


@pytest.mark.parametrize("name,precision", [("resnet18", "fp32"), ("mlp", "int8"), ("transformer", "fp16")])
def test_tampered_model_fails_verification_and_is_never_ready(deployments, tmp_path, name, precision):
    _, exports = deployments[name]
    folder = tmp_path / "repo" / name
    _add_version(folder, "1", exports[precision].path)
    _tampered(exports[precision].path, folder / "1" / "model.onnx")
    _add_version(tmp_path / "repo" / "healthy", "1", exports[precision].path)
    with running_server(tmp_path / "repo") as server:
        http = HTTPClient(server.http_url)
        index = {row["name"]: row for row in http.repository_index()}
        assert index[name]["state"] == "UNAVAILABLE"
        assert "verification failed on instance 0 (cpu)" in index[name]["reason"]
        assert "does NOT match its examples" in index[name]["reason"]
        assert index["healthy"]["state"] == "READY"
        assert not http.is_model_ready(name) and not http.is_ready()
        with pytest.raises(InferenceServerError, match="503.*verification failed"):
            http.infer(name, {"x": np.zeros((1, 1), np.float32)})


def test_skip_verify_serves_an_unverified_model_flagged(deployments, tmp_path):
    _, exports = deployments["mlp"]
    path = tmp_path / "model.onnx"
    _tampered(exports["fp32"].path, path)
    shutil.copytree(sidecar_path(exports["fp32"].path), sidecar_path(path))
    with running_server(path, skip_verify=True, cpu_policy="fixed") as server:
        http = HTTPClient(server.http_url)
        assert http.is_ready()
        parameters = http.model_metadata("model")["parameters"]
        assert parameters.pop("sessions")["policy"] == "fixed"
        assert parameters == {"verified": False, "verification": "skipped (--skip-verify)"}
        config = GRPCClient(server.grpc_address).model_config("model")
        assert config["parameters"]["verified"] == {"string_value": "false"}
        assert config["parameters"]["verification"] == {
            "string_value": '"skipped (--skip-verify)"'}


def test_single_saved_directory_verifies(deployments):
    directory, _ = deployments["transformer"]
    with running_server(directory, model_name="t") as server:
        parameters = HTTPClient(server.http_url).model_metadata("t")["parameters"]
        assert parameters["verified"] and parameters["verification"]["criteria"] == "rtol 0.0001"


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_compare_puts_two_variants_side_by_side(deployments, tmp_path, protocol):
    from typer.testing import CliRunner

    import flowserve.cli

    _, exports = deployments["mlp"]
    for version, precision in ((1, "fp32"), (2, "int8")):
        _add_version(tmp_path / "repo" / "mlp", str(version), exports[precision].path)
    (tmp_path / "repo" / "mlp" / "config.json").write_text(json.dumps({"version_policy": {"policy": "all"}}))
    flowserve.cli._register()
    plot = tmp_path / "compare.png"
    with running_server(tmp_path / "repo") as server:
        url = server.http_url if protocol == "http" else server.grpc_address
        done = CliRunner().invoke(flowserve.cli.app, [
            "perf", url, "-m", "mlp:1", "--compare", "mlp:2", "--concurrency", "4",
            "--duration", "0.4", "--max-requests", "20", "--plot", str(plot),
            "--protocol", protocol])
    assert done.exit_code == 0, done.output
    lines = {line[:32].strip(): line[32:].split() for line in done.output.splitlines()}
    assert lines[""] == ["mlp:1", "mlp:2", "ratio"]
    assert lines["precision"] == ["fp32", "int8"] and lines["verified"] == ["yes", "yes"]
    assert lines["top-1 agreement (examples)"] == ["100.00%", "100.00%"]
    assert lines["errors"] == ["0", "0"] and int(lines["requests"][0]) > 0
    assert lines["throughput (req/s)"][2].endswith("x")
    assert plot.stat().st_size > 1000


@pytest.mark.parametrize("max_batch_size", [0, 2])
def test_last_calls_verify_without_batching_and_split_to_max_batch(tmp_path, max_batch_size):
    import flowserve as flow
    from tests.exporter.helpers import InferenceGraph, mlp

    graph = InferenceGraph(mlp())
    for rows in (3, 4, 5):
        graph(flow.randn(rows, 6))
    flow.save(graph, tmp_path / "d")
    with running_server(tmp_path / "d", model_name="m", max_batch_size=max_batch_size) as server:
        figures = HTTPClient(server.http_url).model_metadata("m")["parameters"]["verification"]
        assert figures["examples"] == 12 and figures["max_abs_err"]["output_0"] < 1e-5


def test_warmup_defaults_to_the_examples_unless_config_sets_one():
    from flowserve.server.config import ModelConfigFile, resolve
    from flowserve.server.settings import ServerSettings

    settings = ServerSettings(model_path="m.onnx")
    assert resolve(ModelConfigFile(), settings).warmup_from_examples
    explicit = resolve(ModelConfigFile.model_validate({"warmup": {"batch_sizes": [4]}}), settings)
    assert not explicit.warmup_from_examples and explicit.warmup_batch_sizes == [4]


def test_examples_linked_from_outside_the_model_folder_are_refused(deployments, tmp_path):
    _, exports = deployments["mlp"]
    folder = tmp_path / "repo" / "m" / "1"
    folder.mkdir(parents=True)
    shutil.copy(exports["fp32"].path, folder / "model.onnx")
    shutil.copytree(sidecar_path(exports["fp32"].path), tmp_path / "elsewhere")
    (folder / "model.examples").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with running_server(tmp_path / "repo") as server:
        (row,) = HTTPClient(server.http_url).repository_index()
        assert row["state"] == "UNAVAILABLE" and "outside the model folder" in row["reason"]


def _saved(directory, tolerance=None):
    """A small saved graph with its last calls as examples, in ``directory``."""
    import flowserve as flow
    from tests.exporter.helpers import called_graph, mlp

    flow.save(called_graph(mlp(), 2, 6), directory, tolerance=tolerance)
    return directory


def _rewrite_manifest(directory, change) -> None:
    manifest = json.loads((directory / "flowserve.json").read_text())
    change(manifest)
    (directory / "flowserve.json").write_text(json.dumps(manifest))


def _strip_examples(directory) -> None:
    """What a tamperer does to skip verification: no examples folder, none listed."""
    shutil.rmtree(directory / "examples")
    _rewrite_manifest(directory, lambda manifest: manifest.update(examples={}))


def _set_rtol(directory, rtol: float) -> None:
    """The stored tolerance changed, and its checksum in the manifest with it."""
    import hashlib

    index = directory / "examples" / "examples.json"
    data = json.loads(index.read_text())
    data["rtol"] = rtol
    index.write_text(json.dumps(data))
    digest = hashlib.sha256(index.read_bytes()).hexdigest()
    _rewrite_manifest(directory, lambda manifest: manifest["examples"].update(
        {"examples/examples.json": digest}))


@pytest.fixture(scope="module")
def tampered_repo(tmp_path_factory):
    from flowserve.exporter.verified import export_verified
    from flowserve.server.verify import MAX_STORED_RTOL

    from .models import mlp as onnx_mlp

    repo = tmp_path_factory.mktemp("tampered")
    _saved(repo / "healthy" / "1")
    _saved(repo / "nested" / "1" / "saved")  # a saved directory inside a version folder
    _strip_examples(_saved(repo / "stripped" / "1"))
    _set_rtol(_saved(repo / "loose" / "1"), 1.0)
    _set_rtol(_saved(repo / "loose_nested" / "1" / "saved"), 0.5)
    _saved(repo / "at_cap" / "1", tolerance=MAX_STORED_RTOL)
    export_verified(_saved(tmp_path_factory.mktemp("source")), repo / "loose_onnx" / "1" / "model.onnx")
    spec = repo / "loose_onnx" / "1" / "model.examples" / "verify.json"
    spec.write_text(spec.read_text().replace('"rtol": 0.0001', '"rtol": 1.0'))
    (repo / "bare_onnx" / "1").mkdir(parents=True)
    onnx.save(onnx_mlp((4, 8, 3), seed=7), repo / "bare_onnx" / "1" / "model.onnx")
    return repo


def _index(server) -> dict:
    return {row["name"]: row for row in HTTPClient(server.http_url).repository_index()}


def test_a_stored_tolerance_above_the_loosest_export_writes_is_refused(tampered_repo):
    with running_server(tampered_repo) as server:
        index = _index(server)
        for name, rtol, where in (("loose", "1", "loose/1/examples/examples.json"),
                                  ("loose_onnx", "1", "loose_onnx/1/model.examples/verify.json"),
                                  ("loose_nested", "0.5", "loose_nested/1/saved/examples/examples.json")):
            assert index[name]["state"] == "UNAVAILABLE", index[name]
            reason = index[name]["reason"]
            assert where in reason and f"rtol {rtol} refused" in reason, reason
            assert "expected at most 0.02" in reason and "bfloat16" in reason, reason
        for name in ("healthy", "nested", "at_cap"):
            assert index[name]["state"] == "READY", index[name]
            assert HTTPClient(server.http_url).model_metadata(name)["parameters"]["verified"] is True
        # without --require-verified a model without examples still loads, flagged
        assert index["stripped"]["state"] == "READY"
        parameters = HTTPClient(server.http_url).model_metadata("stripped")["parameters"]
        assert parameters.pop("sessions")["policy"] in ("fixed", "wide-narrow")
        assert parameters == {
            "verified": False, "verification": "no reference examples stored with the model"}


def test_require_verified_refuses_models_without_examples_naming_the_file(tampered_repo):
    with running_server(tampered_repo, require_verified=True) as server:
        index = _index(server)
        stripped, bare = index["stripped"], index["bare_onnx"]
        assert stripped["state"] == "UNAVAILABLE" and bare["state"] == "UNAVAILABLE"
        assert "stripped/1/flowserve.json: lists no reference examples" in stripped["reason"]
        assert "bare_onnx/1/model.examples/verify.json: missing" in bare["reason"]
        assert "--require-verified" in stripped["reason"] and "--require-verified" in bare["reason"]
        for name in ("healthy", "nested", "at_cap"):
            assert index[name]["state"] == "READY", index[name]
        with pytest.raises(InferenceServerError, match="503.*--require-verified"):
            HTTPClient(server.http_url).infer("stripped", {"x": np.zeros((1, 6), np.float32)})


def test_require_verified_and_skip_verify_contradict():
    from flowserve.server.settings import ServerSettings

    with pytest.raises(ValueError, match="contradicts --skip-verify"):
        ServerSettings(model_path="m", skip_verify=True, require_verified=True)
