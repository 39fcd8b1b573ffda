"""What each peer server needs of an ONNX file: its session and its one input and output."""

from __future__ import annotations

import onnxruntime as ort


def session_and_signature(path: str):
    """The CPU session of ``path``, ``(input name, shape)`` and ``(output name, shape)``, the
    shapes without their leading batch dimension."""
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    (given,), (answered,) = session.get_inputs(), session.get_outputs()
    return (session, (given.name, tuple(given.shape[1:])),
            (answered.name, tuple(answered.shape[1:])))
