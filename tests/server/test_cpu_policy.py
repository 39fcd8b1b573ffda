"""The wide-narrow CPU policy: the batcher's dispatch between one session on every core and
single-threaded sessions (fake sessions that record which ran and how many cores were in
use at once), and the policy's choice, metadata and outputs in a real server."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time

import numpy as np
import onnx
import pytest

from flowserve.clients import HTTPClient
from flowserve.server import ServerSettings, model as served_model
from flowserve.server.batcher import DynamicBatcher
from flowserve.server.config import read_config
from flowserve.server.errors import InferenceFailedError, ModelLoadError

from .conftest import running_server
from .models import mlp

CORES = os.cpu_count() or 1
NARROW = 3  # the fake machine's cores: one narrow session each, the wide one takes all


class FakeCores:
    """Sessions that double ``x``, recording which ran each batch, its rows, and the most
    core tokens in use at once (wide: ``NARROW``, narrow: 1). A row of -1 fails its batch."""

    def __init__(self, delay_s: float = 0.02):
        self.delay_s, self.lock = delay_s, threading.Lock()
        self.in_use = self.peak = 0
        self.ran: list[tuple[int, int]] = []  # (session, rows)

    def runners(self) -> list:
        return [self._session(index, NARROW if index == 0 else 1) for index in range(NARROW + 1)]

    def _session(self, index: int, cores: int):
        def run(inputs):
            with self.lock:
                self.in_use += cores
                self.peak = max(self.peak, self.in_use)
                self.ran.append((index, len(inputs["x"])))
            try:
                time.sleep(self.delay_s)
                if (inputs["x"] == -1).any():
                    raise RuntimeError(f"session {index} was given a poisoned row")
                return {"y": inputs["x"] * 2}
            finally:
                with self.lock:
                    self.in_use -= cores
        return run

    def sessions(self) -> set:
        return {index for index, _ in self.ran}


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


async def started(cores: FakeCores, **options) -> DynamicBatcher:
    options.setdefault("max_batch_size", 64)
    batcher = DynamicBatcher(cores.runners(), wide_narrow=True, **options)
    await batcher.start()
    return batcher


def test_a_lone_request_runs_on_the_wide_session():
    cores, records = FakeCores(delay_s=0.0), []

    async def main():
        batcher = await started(cores, on_batch=records.append)
        for i in range(5):  # one after the other: each finds the cores idle
            result = await batcher.submit({"x": np.full((1, 2), i, np.float32)}, 1)
            np.testing.assert_array_equal(result["y"], np.full((1, 2), 2 * i))
        await batcher.stop()

    run(main())
    assert cores.sessions() == {0}
    assert [record.instance for record in records] == [0] * 5


def test_concurrent_requests_share_the_cores_on_narrow_sessions():
    cores, records = FakeCores(), []

    async def main():
        batcher = await started(cores, on_batch=records.append)
        xs = [np.full((1, 2), i, np.float32) for i in range(6)]
        results = await asyncio.gather(*(batcher.submit({"x": x}, 1) for x in xs))
        await batcher.stop()
        return xs, results

    xs, results = run(main())
    for x, result in zip(xs, results):
        np.testing.assert_array_equal(result["y"], x * 2)
    # six queued at once: shared among the three free cores, two rows each, never wide
    assert sorted(cores.ran) == [(1, 2), (2, 2), (3, 2)]
    assert sorted(record.instance for record in records) == [1, 2, 3]
    assert cores.peak == NARROW


@pytest.mark.parametrize("machine, sessions", [(1, (1, 1)), (2, (2, 1)), (8, (8, 1)), (12, (6, 2)),
                                              (64, (8, 8)), (65, (7, 9))])
def test_many_cores_get_at_most_eight_narrow_sessions_of_equal_threads(machine, sessions):
    assert served_model.narrow_sessions(machine) == sessions


def test_never_more_core_tokens_in_use_than_cores():
    cores = FakeCores(delay_s=0.005)

    async def client(batcher, seed):
        rng = np.random.default_rng(seed)
        for _ in range(8):
            rows = int(rng.integers(1, 4))
            await batcher.submit({"x": np.ones((rows, 2), np.float32)}, rows)
            await asyncio.sleep(float(rng.uniform(0, 0.01)))

    async def main():
        batcher = await started(cores, max_batch_size=4)
        for clients in (1, 2, 5, 1, 7):  # lone requests and bursts, mixed
            await asyncio.gather(*(client(batcher, seed) for seed in range(clients)))
        await batcher.stop()

    run(main())
    assert cores.peak <= NARROW
    assert 0 in cores.sessions() and cores.sessions() - {0}  # both kinds ran
    assert max(rows for _, rows in cores.ran) <= 4


class HeldCores:
    """Narrow sessions that record the rows of each batch they run (``(session, [x])``);
    a batch holding a row of ``HOLD`` or more waits until that row's gate is opened."""

    HOLD = 100

    def __init__(self):
        self.lock = threading.Lock()
        self.ran: list[tuple[int, list]] = []
        self.gates = {self.HOLD + i: threading.Event() for i in range(NARROW)}

    def runners(self) -> list:
        return [self._session(index) for index in range(NARROW + 1)]

    def _session(self, index: int):
        def run(inputs):
            rows = [int(v) for v in inputs["x"][:, 0]]
            with self.lock:
                self.ran.append((index, rows))
            for row in rows:
                if row >= self.HOLD:
                    self.gates[row].wait(30)
            return {"y": inputs["x"] * 2}
        return run


def test_a_session_freed_while_others_run_takes_its_share_oldest_first():
    """Every narrow session busy with one row, six requests queue; one session frees up: it
    takes the oldest rows a share at a time (six queued and two running among three
    sessions: three, then two, then one), not the whole queue, so the oldest are not run
    behind the compute of the later ones, and batches follow the queue's order."""
    cores = HeldCores()

    async def submit(value):
        return await batcher.submit({"x": np.full((1, 2), value, np.float32)}, 1)

    async def main():
        nonlocal batcher
        batcher = await started(cores)
        held = [asyncio.create_task(submit(HeldCores.HOLD + i)) for i in range(NARROW)]
        while len(cores.ran) < NARROW:  # one held request on each narrow session
            await asyncio.sleep(0.001)
        queued = [asyncio.create_task(submit(i)) for i in range(6)]
        while batcher.queued < 6:
            await asyncio.sleep(0)
        cores.gates[HeldCores.HOLD].set()  # one session frees up, the others still run
        results = await asyncio.gather(*queued)
        for gate in cores.gates.values():
            gate.set()
        await asyncio.gather(*held)
        await batcher.stop()
        return results

    batcher = None
    results = run(main())
    assert [int(r["y"][0, 0]) for r in results] == [2 * i for i in range(6)]
    assert sorted(index for index, _ in cores.ran[:NARROW]) == list(range(1, NARROW + 1))
    freed = next(index for index, rows in cores.ran if rows == [HeldCores.HOLD])
    assert cores.ran[NARROW:] == [(freed, [0, 1, 2]), (freed, [3, 4]), (freed, [5])]


def test_a_failed_run_fails_only_its_own_requests():
    cores = FakeCores()

    async def main():
        batcher = await started(cores, max_batch_size=1)
        xs = [np.full((1, 2), -1 if i in (1, 4) else i, np.float32) for i in range(6)]
        results = await asyncio.gather(*(batcher.submit({"x": x}, 1) for x in xs),
                                       return_exceptions=True)
        await batcher.stop()
        return xs, results

    xs, results = run(main())
    for i, (x, result) in enumerate(zip(xs, results)):
        if i in (1, 4):
            assert isinstance(result, InferenceFailedError)
            assert "poisoned row" in str(result)
        else:
            np.testing.assert_array_equal(result["y"], x * 2)


def test_stop_finishes_queued_requests_and_then_the_workers():
    cores = FakeCores(delay_s=0.01)

    async def main():
        batcher = await started(cores, max_batch_size=2)
        tasks = [asyncio.create_task(batcher.submit({"x": np.full((1, 2), i, np.float32)}, 1))
                 for i in range(9)]
        await asyncio.sleep(0)
        await batcher.stop()
        return await asyncio.gather(*tasks)

    results = run(main())
    assert [int(r["y"][0, 0]) for r in results] == [2 * i for i in range(9)]
    assert sum(rows for _, rows in cores.ran) == 9
    assert cores.peak <= NARROW


def test_wide_narrow_needs_a_wide_and_two_narrow_runners():
    with pytest.raises(ValueError, match="at least two narrow ones, got 2 runners"):
        DynamicBatcher([lambda inputs: inputs] * 2, max_batch_size=4, wide_narrow=True)


def _repo(tmp_path, config=None):
    (tmp_path / "m" / "1").mkdir(parents=True)
    onnx.save(mlp((4, 8, 3), seed=3), tmp_path / "m" / "1" / "model.onnx")
    if config is not None:
        (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    return tmp_path


def _answers(server, x) -> list:
    http = HTTPClient(server.http_url)
    return [http.infer("m", {"x": x[i:i + 1]})["y"] for i in range(len(x))]


@pytest.mark.skipif(CORES < 2, reason="one core: no narrow sessions to share it")
def test_a_server_answers_the_same_under_either_policy(tmp_path, monkeypatch):
    monkeypatch.setattr(served_model, "SINGLE_THREAD_BELOW_S", 0.0)
    monkeypatch.setattr(served_model, "WIDE_NARROW_FROM_S", 0.0)  # every run is long: auto picks wide-narrow
    x = np.random.default_rng(0).standard_normal((12, 4)).astype(np.float32)
    with running_server(_repo(tmp_path), cpu_policy="fixed") as server:
        expected = _answers(server, x)
    with running_server(_repo(tmp_path / "auto")) as server:
        http = HTTPClient(server.http_url)
        sessions = http.model_metadata("m")["parameters"]["sessions"]
        assert sessions == {"policy": "wide-narrow", "threads": [CORES] + [1] * CORES}
        groups = http.model_config("m")["instance_group"]
        assert [(g["count"], g["kind"]) for g in groups] == [(1, "KIND_CPU"), (CORES, "KIND_CPU")]
        assert [a.tobytes() for a in _answers(server, x)] == [e.tobytes() for e in expected]
        answers = _concurrent_answers(server.http_url, x)  # narrow sessions, merged batches
        assert [a.tobytes() for a in answers] == [e.tobytes() for e in expected]


def _concurrent_answers(url: str, x: np.ndarray) -> list:
    answers = [None] * len(x)

    def ask(i):
        answers[i] = HTTPClient(url).infer("m", {"x": x[i:i + 1]})["y"]

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(x))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


@pytest.mark.skipif(CORES < 2, reason="one core: no narrow sessions to share it")
def test_instances_or_threads_set_keep_the_fixed_sessions(tmp_path, monkeypatch):
    monkeypatch.setattr(served_model, "SINGLE_THREAD_BELOW_S", 0.0)
    monkeypatch.setattr(served_model, "WIDE_NARROW_FROM_S", 0.0)
    with running_server(_repo(tmp_path), instances=2, intra_op_threads=1) as server:
        sessions = HTTPClient(server.http_url).model_metadata("m")["parameters"]["sessions"]
        assert sessions == {"policy": "fixed", "threads": [1, 1]}
    with running_server(_repo(tmp_path / "c", {"instance_count": 1})) as server:
        sessions = HTTPClient(server.http_url).model_metadata("m")["parameters"]["sessions"]
        assert sessions == {"policy": "fixed", "threads": [CORES]}
    # config.json's policy wins over the server's fixed instances
    with running_server(_repo(tmp_path / "w", {"cpu_policy": "wide-narrow"}), instances=2) as server:
        sessions = HTTPClient(server.http_url).model_metadata("m")["parameters"]["sessions"]
        assert sessions["policy"] == "wide-narrow"


def test_wide_narrow_refuses_fixed_instances_or_threads(tmp_path):
    with pytest.raises(ValueError, match="leave --instances and --intra-op-threads unset"):
        ServerSettings(model_path=".", cpu_policy="wide-narrow", instances=2)
    (tmp_path / "config.json").write_text(json.dumps({"cpu_policy": "wide-narrow",
                                                      "intra_op_threads": 2}))
    with pytest.raises(ModelLoadError, match="config.json: .*leave instance_count and "
                                             "intra_op_threads unset"):
        read_config(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"cpu_policy": "narrow"}))
    with pytest.raises(ModelLoadError, match="cpu_policy"):
        read_config(tmp_path)
