"""``--workers N`` / ``--grpc-workers M``: several processes behind one port.

Behaviour only: every worker answers (connections spread over them), the metrics
of any worker add up every worker's requests, a stop lets every worker finish the
requests it holds, and each exits cleanly; a worker killed with SIGKILL is replaced
while the others go on answering, and a crash loop stops the server with status 1.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import onnx
import pytest

from flowserve.clients import GRPCClient
from flowserve.server import InferenceServer, ServerSettings, WorkerPool
from flowserve.server.batcher import BatchRecord
from flowserve.server.metrics import ServerMetrics
from flowserve.server.model import ComputeStatistics, ModelStatistics

from .conftest import running_server
from .models import IR_VERSION, OPSET, mlp_reference, write_repository

MODEL = "tiny"


def http_infer(url: str, x: np.ndarray) -> np.ndarray:
    """One request on a connection of its own (so the kernel picks a worker for it)."""
    body = {"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32",
                        "data": x.ravel().tolist()}]}
    answer = httpx.post(f"{url}/v2/models/{MODEL}/infer", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    output = answer.json()["outputs"][0]
    return np.asarray(output["data"], np.float32).reshape(output["shape"])


def send_infer(port: int, x: np.ndarray) -> socket.socket:
    """A connection that has sent one whole infer request (the answer is read later)."""
    body = json.dumps({"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32",
                                   "data": x.ravel().tolist()}]}).encode()
    head = (f"POST /v2/models/{MODEL}/infer HTTP/1.1\r\nhost: 127.0.0.1\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n").encode()
    connection = socket.create_connection(("127.0.0.1", port), timeout=60)
    connection.sendall(head + body)
    return connection


def read_answer(connection: socket.socket) -> np.ndarray:
    with connection:
        data = b"".join(iter(lambda: connection.recv(65536), b""))
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), data
    output = json.loads(body)["outputs"][0]
    return np.asarray(output["data"], np.float32).reshape(output["shape"])


def served_requests(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return sum(float(v) for v in re.findall(r'^flowserve_request_success_total\{[^}]*\} (\S+)$',
                                           text, re.M))


def wait_for_total(url: str, expected: int, timeout_s: float = 30.0) -> float:
    """The summed success counter once it reaches ``expected`` (workers publish each second)."""
    deadline, total = time.monotonic() + timeout_s, 0.0
    while time.monotonic() < deadline:
        total = served_requests(url)
        if total >= expected:
            return total
        time.sleep(0.3)
    return total


def worker_counts(pool: WorkerPool) -> dict:
    """Requests each worker counted, from the snapshots the workers published."""
    counts = {}
    for process in pool.processes:
        path = pathlib.Path(pool.metrics_dir) / f"worker-{process.pid}.json"
        rows = json.loads(path.read_text())["series"] if path.exists() else []
        counts[process.pid] = sum(values["success"] for _, _, values in rows)
    return counts


def test_workers_share_the_ports_add_up_metrics_and_drain_on_stop(mlp_file):
    model = onnx.load(mlp_file)
    settings = ServerSettings(model_path=str(mlp_file), http_port=0, grpc_port=0,
                              log_level="warning", workers=2, grpc_workers=1,
                              max_queue_delay_us=1_000_000)  # requests wait: they are in flight
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((1, 4)).astype(np.float32) for _ in range(16)]
    with concurrent.futures.ThreadPoolExecutor(16) as threads:
        pool = WorkerPool(settings)
        with pool.background():
            url = pool.http_url
            for x, y in zip(xs, threads.map(lambda x: http_infer(url, x), xs)):
                np.testing.assert_allclose(y, mlp_reference(model, x), rtol=1e-5, atol=1e-5)
            grpc_outputs = [GRPCClient(pool.grpc_address).infer(MODEL, {"x": x})
                            for x in xs[:2]]
            for x, outputs in zip(xs, grpc_outputs):
                np.testing.assert_allclose(outputs["y"], mlp_reference(model, x), rtol=1e-5,
                                           atol=1e-5)
            assert wait_for_total(url, 18) == 18  # any worker's /metrics counts all workers
            in_flight = [send_infer(pool.http_port, x) for x in xs]
            time.sleep(0.4)  # read by the workers, waiting in their queues (1 s)
        drained = [read_answer(connection) for connection in in_flight]
    for x, y in zip(xs, drained):
        np.testing.assert_allclose(y, mlp_reference(model, x), rtol=1e-5, atol=1e-5)
    assert [process.exitcode for process in pool.processes] == [0, 0]


def test_every_worker_serves_and_publishes_its_final_counts(mlp_file, tmp_path):
    settings = ServerSettings(model_path=str(mlp_file), http_port=0, grpc_port=None,
                              log_level="warning", workers=2)
    pool = WorkerPool(settings)
    x = np.ones((1, 4), np.float32)
    with pool.background():
        for _ in range(40):  # 40 connections: all on one worker has odds 2**-39
            http_infer(pool.http_url, x)
        counts_dir = pathlib.Path(pool.metrics_dir)
        # read the final snapshots while the folder still exists: stop the workers first,
        # once the supervisor no longer replaces workers that exit
        pool.stop()
        assert wait_until(lambda: pool.exit_status == 0, 30)
        for process in pool.processes:
            process.terminate()
        for process in pool.processes:
            process.join(60)
        counts = worker_counts(pool)
        assert counts_dir.exists()
    assert sorted(counts) == sorted(p.pid for p in pool.processes)
    assert all(count > 0 for count in counts.values()), counts
    assert sum(counts.values()) == 40
    assert not counts_dir.exists()  # the supervisor removes its shared folder


def test_grpc_workers_beyond_workers_is_refused_in_one_line(mlp_file):
    done = subprocess.run([sys.executable, "-m", "flowserve.server", str(mlp_file),
                           "--workers", "2", "--grpc-workers", "3"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "--grpc-workers" in done.stderr and "exceeds --workers (2)" in done.stderr


@pytest.mark.parametrize("workers", [0, -1])
def test_workers_must_be_positive(workers):
    with pytest.raises(ValueError, match="workers"):
        ServerSettings(model_path="m.onnx", workers=workers)


def test_metrics_add_the_other_workers_snapshots(tmp_path):
    class Model:
        name, version = "m", "1"

    peer = ServerMetrics(str(tmp_path))
    peer.request("m", "1", ok=True, seconds=0.002)
    peer.request("m", "1", ok=False, seconds=0.001, reason="QueueFullError")
    peer.batch(Model, BatchRecord(rows=3, requests=2, queue_s=[0.0, 0.0], compute_s=0.001,
                                  failed=False))
    peer.publish()
    (tmp_path / f"worker-{os.getpid()}.json").rename(tmp_path / "worker-1.json")
    own = ServerMetrics(str(tmp_path))
    own.request("m", "1", ok=True, seconds=0.003)
    text = own.render().decode()
    assert 'flowserve_request_success_total{model="m",version="1"} 2.0' in text
    assert ('flowserve_request_failure_total{model="m",reason="QueueFullError",version="1"} 1.0'
            in text)
    assert 'flowserve_inference_count_total{model="m",version="1"} 3.0' in text
    assert 'flowserve_request_duration_seconds_count{model="m",version="1"} 3.0' in text
    own.publish()  # its own file is not counted twice
    assert 'flowserve_request_success_total{model="m",version="1"} 2.0' in own.render().decode()


def answer_or_none(connection: socket.socket):
    """The answer on ``connection``, or None when it was closed without one (its worker died)."""
    try:
        with connection:
            data = b"".join(iter(lambda: connection.recv(65536), b""))
    except ConnectionResetError:
        return None
    if not data:
        return None
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), data
    output = json.loads(body)["outputs"][0]
    return np.asarray(output["data"], np.float32).reshape(output["shape"])


def wait_until(condition, timeout_s: float = 120.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_a_killed_worker_is_restarted_while_the_other_keeps_answering(mlp_file):
    model = onnx.load(mlp_file)
    settings = ServerSettings(model_path=str(mlp_file), http_port=0, grpc_port=None,
                              log_level="warning", workers=2, max_queue_delay_us=500_000)
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((1, 4)).astype(np.float32) for _ in range(16)]
    pool = WorkerPool(settings)
    with pool.background(), concurrent.futures.ThreadPoolExecutor(8) as threads:
        victim = pool.processes[0]
        in_flight = [send_infer(pool.http_port, x) for x in xs]
        time.sleep(0.2)  # read by the workers, waiting in their queues (0.5 s)
        os.kill(victim.pid, signal.SIGKILL)
        answers = [answer_or_none(connection) for connection in in_flight]
        # the other worker's in-flight requests are answered, and right
        assert any(y is not None for y in answers)
        for x, y in zip(xs, answers):
            if y is not None:
                np.testing.assert_allclose(y, mlp_reference(model, x), rtol=1e-5, atol=1e-5)
        # new connections are answered at once, whether the restart is done or not
        for x, y in zip(xs, threads.map(lambda x: http_infer(pool.http_url, x), xs)):
            np.testing.assert_allclose(y, mlp_reference(model, x), rtol=1e-5, atol=1e-5)
        assert wait_until(lambda: pool.processes[0].pid != victim.pid and pool.is_ready(0))
        restarted = pool.processes[0].pid
        snapshot = pathlib.Path(pool.metrics_dir) / f"worker-{restarted}.json"

        def restarted_worker_answered() -> bool:
            list(threads.map(lambda x: http_infer(pool.http_url, x), xs))
            rows = json.loads(snapshot.read_text())["series"] if snapshot.exists() else []
            return sum(values["success"] for _, _, values in rows) > 0

        assert wait_until(restarted_worker_answered)  # it binds the same port (SO_REUSEPORT)
        assert pool.exit_status is None and pool.processes[1].is_alive()
    assert victim.exitcode == -signal.SIGKILL
    assert pool.exit_status == 0
    assert [process.exitcode for process in pool.processes] == [0, 0]


def ready_answers(url: str, model: str, connections: int = 30) -> list[bool]:
    """Whether ``model`` is ready, asked on ``connections`` connections of their own (all on
    one worker of two has odds 2**-29)."""
    return [httpx.get(f"{url}/v2/models/{model}/ready", timeout=30).status_code == 200
            for _ in range(connections)]


def control(url: str, model: str, action: str) -> None:
    answer = httpx.post(f"{url}/v2/repository/models/{model}/{action}", json={}, timeout=120)
    assert answer.status_code == 200, answer.text


def test_model_load_and_unload_reach_every_worker_a_restarted_one_too(tmp_path):
    repository = write_repository(tmp_path / "repo")
    settings = ServerSettings(model_path=str(repository), http_port=0, grpc_port=None,
                              log_level="warning", workers=2, allow_model_control=True)
    pool = WorkerPool(settings)
    with pool.background():
        url = pool.http_url
        assert all(ready_answers(url, "mlp"))
        control(url, "mlp", "unload")  # answered once both workers have unloaded it
        assert not any(ready_answers(url, "mlp"))
        assert all(ready_answers(url, "types"))  # the other models serve on
        control(url, "mlp", "load")
        assert all(ready_answers(url, "mlp"))
        control(url, "types", "unload")
        victim = pool.processes[1].pid
        os.kill(victim, signal.SIGKILL)  # its replacement loads every model, then follows the unload
        assert wait_until(lambda: pool.processes[1].pid != victim and pool.is_ready(1))
        assert not any(ready_answers(url, "types"))
        assert all(ready_answers(url, "mlp"))
        control(url, "types", "load")  # the restarted worker follows later requests as well
        assert all(ready_answers(url, "types"))
    assert pool.exit_status == 0


def test_a_crash_loop_stops_the_server_with_one_line_and_status_1(mlp_file, tmp_path, caplog):
    """Restarts beyond --worker-restarts-per-minute: the model file is gone, so the worker
    restarted after a SIGKILL dies while it starts; its death is one too many."""
    model_path = tmp_path / "tiny.onnx"
    shutil.copy(mlp_file, model_path)
    settings = ServerSettings(model_path=str(model_path), http_port=0, grpc_port=None,
                              log_level="warning", workers=2, worker_restarts_per_minute=1)
    pool = WorkerPool(settings)
    first_pids = []

    def break_a_worker():
        if not wait_until(lambda: len(pool.processes) == 2 and pool.is_ready(1) and pool.is_ready(0)):
            pool.stop()
            return
        first_pids.extend(p.pid for p in pool.processes)
        model_path.unlink()
        os.kill(first_pids[0], signal.SIGKILL)
        if not wait_until(lambda: pool.exit_status is not None, 180):
            pool.stop()

    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    breaker = threading.Thread(target=break_a_worker, daemon=True)
    breaker.start()
    try:
        with caplog.at_level("WARNING", logger="flowserve.server"):
            status = pool.run()
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        breaker.join(5)
    assert status == 1 and pool.exit_status == 1
    assert pool.processes[0].pid not in first_pids  # it was restarted once
    assert not any(process.is_alive() for process in pool.processes)
    lines = [r.getMessage() for r in caplog.records if "worker-restarts-per-minute" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "flowserve-worker-0" in lines[0] and "1 restart(s) in the last 60 s" in lines[0]


def test_worker_restarts_per_minute_is_not_negative():
    with pytest.raises(ValueError, match="worker_restarts_per_minute"):
        ServerSettings(model_path="m.onnx", worker_restarts_per_minute=-1)


def test_a_worker_takes_connections_only_once_its_models_are_loaded(mlp_file, monkeypatch):
    """A restarted worker joins the port when it can answer: until then its peers get
    every new connection (none waits in, or is reset with, the backlog of a loading one)."""
    from flowserve.server.dataplane import DataPlane

    loading, loaded, stop, served = (threading.Event() for _ in range(4))
    load = DataPlane.start

    async def slow_start(plane):
        loading.set()
        await asyncio.to_thread(loaded.wait, 60)
        await load(plane)

    monkeypatch.setattr(DataPlane, "start", slow_start)
    server = InferenceServer(ServerSettings(model_path=str(mlp_file), http_port=0, grpc_port=None,
                                            log_level="warning", reuse_port=True))

    def serve():
        with server.background():
            served.set()
            stop.wait(60)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        assert loading.wait(60) and server.http_port
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", server.http_port), timeout=10).close()
        loaded.set()
        assert served.wait(60)
        assert http_infer(server.http_url, np.ones((1, 4), np.float32)).shape == (1, 3)
    finally:
        loaded.set()
        stop.set()
        thread.join(60)


def http_statistics(url: str) -> dict:
    """``tiny``'s Triton statistics, asked on a connection of its own."""
    answer = httpx.get(f"{url}/v2/models/{MODEL}/stats", timeout=30)
    assert answer.status_code == 200, answer.text
    (stats,) = answer.json()["model_stats"]
    return stats


def grpc_statistics(address: str) -> dict:
    with GRPCClient(address) as client:  # a channel, so a connection, of its own
        (stats,) = client.statistics(MODEL)["model_stats"]
    return stats


def figures(stats: dict) -> tuple:
    """The counts of a statistics answer (HTTP's JSON or gRPC's message as a dict)."""
    infer = stats.get("inference_stats", {})
    return (int(stats.get("inference_count", 0)), int(stats.get("execution_count", 0)),
            int(infer.get("success", {}).get("count", 0)),
            int(infer.get("compute_infer", {}).get("count", 0)),
            sorted((int(b["batch_size"]), int(b["compute_infer"]["count"]))
                   for b in stats.get("batch_stats", [])))


def agreeing_answers(ask, expected_inferences: int, answers: int = 8,
                     timeout_s: float = 60.0) -> list:
    """``answers`` consecutive statistics answers (each on a fresh connection) that all
    count ``expected_inferences``: the workers publish each second, so a worker's view of
    another can lag until then. Fewer when the deadline passes first."""
    deadline, agreeing = time.monotonic() + timeout_s, []
    while len(agreeing) < answers and time.monotonic() < deadline:
        stats = ask()
        if int(stats.get("inference_count", 0)) == expected_inferences:
            agreeing.append(stats)
        else:
            agreeing.clear()
            time.sleep(0.2)
    return agreeing


def test_triton_statistics_add_up_across_workers_on_http_and_grpc(mlp_file):
    settings = ServerSettings(model_path=str(mlp_file), http_port=0, grpc_port=0,
                              log_level="warning", workers=2)
    pool = WorkerPool(settings)
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((1 + i % 2, 4)).astype(np.float32) for i in range(40)]
    rows = sum(len(x) for x in xs)
    with pool.background():
        for x in xs:  # 40 connections: all on one worker has odds 2**-39
            http_infer(pool.http_url, x)
        http_answers = agreeing_answers(lambda: http_statistics(pool.http_url), rows)
        grpc_answers = agreeing_answers(lambda: grpc_statistics(pool.grpc_address), rows)
        published = [json.loads((pathlib.Path(pool.metrics_dir) / f"worker-{p.pid}.json")
                                .read_text())["statistics"] for p in pool.processes]
    assert len(http_answers) == 8 and len(grpc_answers) == 8
    # 8 fresh connections each: both workers answered (all on one has odds 2**-7 per
    # protocol), and every answer is the same
    assert all(stats == http_answers[0] for stats in http_answers)
    total = figures(http_answers[0])
    assert all(figures(stats) == total for stats in grpc_answers)
    inferences, executions, successes, computes, batches = total
    assert successes == len(xs) and computes == executions
    assert sum(count for _, count in batches) == executions
    assert sum(size * count for size, count in batches) == rows
    # each worker counted only its own requests, and the answers add both
    own = [sum(values["inference_count"] for _, _, values in worker) for worker in published]
    assert all(count > 0 for count in own), own
    assert sum(own) == rows
    last = max(values["last_inference_ms"] for worker in published for _, _, values in worker)
    assert http_answers[0]["last_inference"] == last


def test_statistics_add_the_other_workers_snapshots_and_skip_bad_ones(tmp_path, caplog):
    def record(rows: int) -> BatchRecord:
        return BatchRecord(rows=rows, requests=1, queue_s=[0.001], compute_s=0.002,
                           failed=False)

    first = ModelStatistics(inference_count=5, execution_count=2, last_inference_ms=1_000)
    first.batches = {1: ComputeStatistics(1, 10, 20, 30), 4: ComputeStatistics(1, 1, 2, 3)}
    second = ModelStatistics(inference_count=4, execution_count=1, last_inference_ms=3_000)
    second.batches = {4: ComputeStatistics(1, 5, 5, 5)}
    for index, stats in enumerate([first, second]):
        peer = ServerMetrics(str(tmp_path), statistics=lambda: [["m", "1", stats.snapshot()]])
        peer.request("m", "1", ok=True, seconds=0.002)
        peer.batch(type("Model", (), {"name": "m", "version": "1"}), record(2))
        peer.publish()
        (tmp_path / f"worker-{os.getpid()}.json").rename(tmp_path / f"worker-{index}.json")
    broken = first.snapshot() | {"inference_count": -3}
    (tmp_path / "worker-7.json").write_text(json.dumps({"series": [],
                                                        "statistics": [["m", "1", broken]]}))
    (tmp_path / "worker-8.json").write_text("{not json")
    (tmp_path / "worker-9.json").write_text(json.dumps([1, 2]))
    own = ServerMetrics(str(tmp_path))
    with caplog.at_level("WARNING", logger="flowserve.server"):
        merged = own.peer_statistics()
        text = own.render().decode()
    total = merged["m", "1"]
    assert (total.inference_count, total.execution_count, total.last_inference_ms) == (9, 3, 3_000)
    assert total.batches == {1: ComputeStatistics(1, 10, 20, 30),
                             4: ComputeStatistics(2, 6, 7, 8)}
    # the metrics of the well-formed snapshots still add up beside the skipped ones
    assert 'flowserve_request_success_total{model="m",version="1"} 2.0' in text
    messages = " ".join(r.getMessage() + str(getattr(r, "error", "")) for r in caplog.records)
    assert "inference_count: expected an integer >= 0, got -3" in messages
    assert "not JSON" in messages and "not a JSON object" in messages


def test_an_oversized_snapshot_is_skipped_unread(tmp_path, caplog):
    rows = [["m", "1", ModelStatistics(inference_count=2).snapshot()]]
    (tmp_path / "worker-1.json").write_text(json.dumps({"series": [], "statistics": rows}))
    (tmp_path / "worker-2.json").write_text(json.dumps(
        {"series": [], "statistics": rows, "padding": "x" * 1_000}))
    with caplog.at_level("WARNING", logger="flowserve.server"):
        own = ServerMetrics(str(tmp_path))
        own.snapshot_limit_bytes = 1_000
        merged = own.peer_statistics()
    assert merged["m", "1"].inference_count == 2
    assert any("over the size limit" in r.getMessage() for r in caplog.records)


def _wide_matmul_repository(root: pathlib.Path) -> pathlib.Path:
    """A model whose runs are long enough to get every CPU's thread: a 1024 x 2048 product,
    which at its largest batch (64 rows, 268 MFLOP) takes far more than the single-thread
    threshold on any CPU (at batch 4 a fast AVX-512 core does it within it), under the
    ``fixed`` policy (``auto`` could pick ``wide-narrow`` where batch 1 is slow)."""
    weight = np.random.default_rng(0).standard_normal((1024, 2048)).astype(np.float32)
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("MatMul", ["x", "w"], ["y"])], "wide",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["n", 1024])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["n", 2048])],
        [onnx.numpy_helper.from_array(weight, "w")])
    (root / "wide" / "1").mkdir(parents=True)
    onnx.save(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", OPSET)],
                                     ir_version=IR_VERSION), root / "wide" / "1" / "model.onnx")
    (root / "wide" / "config.json").write_text(json.dumps({"max_batch_size": 64, "instance_count": 1,
                                                           "cpu_policy": "fixed"}))
    return root


def test_each_worker_sizes_its_sessions_for_its_share_of_the_cpus(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWSERVE_CPUS", "4")
    repository = _wide_matmul_repository(tmp_path)
    with running_server(repository) as server:
        alone = httpx.get(f"{server.http_url}/v2/models/wide", timeout=30).json()
    settings = ServerSettings(model_path=str(repository), http_port=0, grpc_port=None,
                              log_level="warning", workers=2)
    with WorkerPool(settings).background() as pool:
        shared = [httpx.get(f"{pool.http_url}/v2/models/wide", timeout=30,
                            headers={"connection": "close"}).json() for _ in range(4)]
    assert alone["parameters"]["sessions"] == {"policy": "fixed", "threads": [4]}
    assert all(m["parameters"]["sessions"] == {"policy": "fixed", "threads": [2]} for m in shared)
