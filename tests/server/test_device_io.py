"""``DeviceIO``, the IO-bound batch run of a CUDA session (``tests/gpu`` runs it on a
GPU), bound to CPU memory here: same answers as ``session.run``, input buffers reused."""

from __future__ import annotations

import numpy as np

from flowserve.server.runtime import DeviceIO, OrtRunner

from .models import mlp


def test_device_io_reuses_its_input_buffers_and_answers_as_run():
    runner = OrtRunner(mlp(), device="cpu")
    assert runner._device_io is None  # a CPU session runs plainly
    io = DeviceIO(runner._session, runner.output_names, device="cpu")
    held = []
    for i, rows in enumerate((3, 3, 5, 1, 3)):  # shapes repeat, change and come back
        x = np.random.default_rng(i).standard_normal((rows, 4)).astype(np.float32)
        (got,) = io.run({"x": x})
        np.testing.assert_array_equal(got, runner.run({"x": x})["y"])
        held.append(io._inputs["x"][2])
    assert held[0] is held[1] and held[1] is not held[2]
