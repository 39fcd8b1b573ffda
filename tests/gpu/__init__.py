"""Tests that run on a CUDA GPU: ``pytest -m gpu`` on a machine with one. Without a GPU
(CI) every test here skips with the reason."""

from __future__ import annotations

import pytest

import flowserve as flow
from flowserve.onnx_backend import runtime

# eager tensors on "cuda" are CuPy arrays
needs_cupy = pytest.mark.skipif(not flow.cuda.is_available(), reason="no usable CUDA GPU with CuPy here")
# graphs and served models on "cuda" run on ONNX Runtime's CUDA provider
needs_ort_cuda = pytest.mark.skipif(not runtime.cuda_usable(),
                                    reason="onnxruntime has no usable CUDA provider and GPU here")
