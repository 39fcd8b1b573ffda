"""``DeviceIO``, the IO-bound batch run of a CUDA model (``tests/gpu`` runs it on a GPU),
bound to CPU memory here: the answers of ``session.run``, input buffers kept per shape,
batches padded up to the batch-size buckets and cut back, a session per bucket, runs
serialised."""

from __future__ import annotations

import concurrent.futures

import numpy as np

from flowserve.server.runner import DeviceIO, OrtRunner, batch_buckets

from .models import mlp


def _rows(rows: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, 4)).astype(np.float32)


def test_device_io_keeps_a_buffer_per_shape_and_answers_as_run():
    runner = OrtRunner(mlp(), device="cpu")
    assert runner._device_io is None and runner.batch_buckets == ()  # a CPU session runs plainly
    io = DeviceIO(runner._session, runner.output_names, device="cpu")
    for i, rows in enumerate((3, 3, 5, 1, 3)):  # shapes repeat, change and come back
        x = _rows(rows, i)
        (got,) = io.run({"x": x})
        np.testing.assert_array_equal(got, runner.run({"x": x})["y"])
    assert io.sessions == 1 and sorted(key[1][0] for key in io._lanes[None]._inputs) == [1, 3, 5]


def test_batches_are_padded_up_to_the_buckets_and_cut_back():
    assert batch_buckets(64) == (1, 2, 4, 8, 16, 32, 64) and batch_buckets(48) == (1, 2, 4, 8, 16, 32, 48)
    assert batch_buckets(1) == (1,)
    runner = OrtRunner(mlp(), device="cpu")
    made = []

    def new_session():
        made.append(OrtRunner(mlp(), device="cpu")._session)
        return made[-1]

    io = DeviceIO(runner._session, runner.output_names, device="cpu", buckets=batch_buckets(8),
                  new_session=new_session)
    for i, rows in enumerate((3, 5, 8, 1, 6, 3)):
        x = _rows(rows, i)
        (got,) = io.run({"x": x})
        assert got.shape == (rows, 3)
        np.testing.assert_allclose(got, runner.run({"x": x})["y"], rtol=1e-6, atol=1e-6)
    assert sorted(io._lanes) == [1, 4, 8]  # 3 ran as 4, 5 and 6 as 8
    assert io.sessions == 3 and len(made) == 2  # a session per batch size, the first the runner's
    assert all(list(lane._inputs)[0][1][0] == size for size, lane in io._lanes.items())


def test_runs_on_one_device_io_from_many_threads_are_serialised():
    runner = OrtRunner(mlp(), device="cpu")
    io = DeviceIO(runner._session, runner.output_names, device="cpu", buckets=batch_buckets(8))
    batches = [_rows(1 + i % 8, i) for i in range(48)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda x: io.run({"x": x})[0], batches))
    for x, got in zip(batches, results):
        np.testing.assert_allclose(got, runner.run({"x": x})["y"], rtol=1e-6, atol=1e-6)
