"""ONNX Runtime threads per session: ``intra_op_threads`` from the settings and from
``config.json`` reach the sessions; left at 0, a model whose runs are short gets one
thread, decided by what its runs measure at load."""

from __future__ import annotations

import asyncio
import json
import os

import numpy as np
import onnx
import pytest

from flowserve.server import ServerSettings, model as served_model
from flowserve.server.config import read_config
from flowserve.server.errors import ModelLoadError
from flowserve.server.repository import ModelRepository

from .models import mlp, mlp_reference

CORES = os.cpu_count() or 1


def _repo(tmp_path, config=None):
    (tmp_path / "m" / "1").mkdir(parents=True)
    onnx.save(mlp(), tmp_path / "m" / "1" / "model.onnx")
    if config is not None:
        (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    return tmp_path


def _loaded(tmp_path, **settings):
    """The threads of each session of model ``m``, and its output for a fixed input."""
    async def main():
        repository = ModelRepository(ServerSettings(model_path=str(tmp_path), **settings))
        await repository.load_all()
        model = repository.get("m")  # loaded, verified and started
        try:
            x = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
            y = (await model.infer({"x": x}))["y"]
        finally:
            await repository.close()
        return [runner.intra_op_threads for runner in model.runners], x, y

    return asyncio.run(main())


@pytest.mark.skipif(CORES < 2, reason="one core: every session has one thread anyway")
def test_a_model_with_short_runs_gets_one_thread(tmp_path):
    threads, x, y = _loaded(_repo(tmp_path))
    assert threads == [1]
    np.testing.assert_allclose(y, mlp_reference(mlp(), x), rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(CORES < 2, reason="one core: every session has one thread anyway")
def test_a_model_whose_runs_are_long_keeps_every_core(tmp_path, monkeypatch):
    monkeypatch.setattr(served_model, "SINGLE_THREAD_BELOW_S", 0.0)
    monkeypatch.setattr(served_model, "WIDE_NARROW_FROM_S", 0.0)  # every run is long
    threads, _, _ = _loaded(_repo(tmp_path), cpu_policy="fixed")
    assert threads == [CORES]
    # the default policy adds one single-threaded session per core (wide-narrow)
    threads, _, _ = _loaded(_repo(tmp_path / "auto"))
    assert threads == [CORES] + [1] * CORES


@pytest.mark.skipif(CORES < 2, reason="one core: every session has one thread anyway")
def test_a_model_of_runs_neither_short_nor_long_keeps_one_session_on_every_core(tmp_path, monkeypatch):
    monkeypatch.setattr(served_model, "SINGLE_THREAD_BELOW_S", 0.0)
    monkeypatch.setattr(served_model, "WIDE_NARROW_FROM_S", float("inf"))  # runs as short as the MLP's
    threads, _, _ = _loaded(_repo(tmp_path))
    assert threads == [CORES]


def test_the_setting_and_config_json_choose_the_threads(tmp_path):
    threads, x, y = _loaded(_repo(tmp_path), intra_op_threads=2)
    assert threads == [2]
    np.testing.assert_allclose(y, mlp_reference(mlp(), x), rtol=1e-5, atol=1e-6)
    threads, _, _ = _loaded(_repo(tmp_path / "c", {"intra_op_threads": 3,
                                                  "instance_count": 2}),
                            intra_op_threads=2)
    assert threads == [3, 3]  # config.json wins over the server's setting


def test_config_json_refuses_negative_threads(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"intra_op_threads": -1}))
    with pytest.raises(ModelLoadError, match="intra_op_threads"):
        read_config(tmp_path)
