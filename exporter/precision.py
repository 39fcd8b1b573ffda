"""Reduced-precision variants of an exported model, made with ONNX Runtime's own tools.

* ``int8``: ``onnxruntime.quantization.quantize_static`` in QDQ format, weights int8 per
  channel, activations uint8 (the U8S8 kernels x86 CPUs run fastest), calibrated (min-max)
  on the stored example inputs through a ``CalibrationDataReader``, after ONNX Runtime's
  ``quant_pre_process`` (shape inference and graph optimisation);
* ``int8-dynamic``: ``quantize_dynamic``: int8 weights, activations quantized per call
  (MatMul-heavy models such as transformers; needs no calibration);
* ``fp16``: ``onnxruntime.transformers.float16.convert_float_to_float16``, inputs and
  outputs kept float32 (``keep_io_types``), so clients send and receive what they did;
* ``bf16``: needs a CUDA GPU, where ONNX Runtime has bfloat16 kernels; refused elsewhere.

The quantizers see standard ops only, so the model is first exported with the portable
target and its fused local functions are inlined (``onnx.inliner``): a fused
Conv+BatchNorm+ReLU group becomes ``Conv`` (BatchNorm folded) + ``Relu``, which the
quantizer turns into ``QLinearConv`` with the activation absorbed.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import onnx
import onnx.inliner
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static
from onnxruntime.quantization.shape_inference import quant_pre_process
from onnxruntime.transformers.float16 import convert_float_to_float16

from flowserve.errors import ExportError
from flowserve.exporter.runtime import cuda_usable
from flowserve.serialization.examples import ExampleSet

PRECISIONS = ("fp32", "int8", "int8-dynamic", "fp16", "bf16")
DESCRIPTIONS = {
    "fp32": "float32 (as trained)",
    "int8": "int8 static: QDQ, per-channel int8 weights, uint8 activations calibrated on the examples",
    "int8-dynamic": "int8 dynamic: int8 weights, activations quantized per call",
    "fp16": "float16 weights and activations, float32 inputs and outputs",
    "bf16": "bfloat16 (CUDA only)",
}


class ExampleCalibrationReader(CalibrationDataReader):
    """Feeds the stored example inputs, batch by batch, to ONNX Runtime's calibrator."""

    def __init__(self, examples: ExampleSet):
        self._batches = [dict(b.inputs) for b in examples.batches]
        self._position = 0

    def get_next(self):
        if self._position >= len(self._batches):
            return None
        self._position += 1
        return self._batches[self._position - 1]

    def rewind(self) -> None:
        self._position = 0


def check_precision(precision: str) -> None:
    """Refuse an unknown precision, or bf16 without a usable CUDA GPU, with one line."""
    if precision not in PRECISIONS:
        raise ExportError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "bf16" and not cuda_usable():
        raise ExportError("precision bf16 needs a CUDA GPU (ONNX Runtime has no bfloat16 kernels for these "
                          "ops on CPU) and none is usable here; use fp16 or int8 on CPU")


def inline_functions(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with its local functions (fused groups) inlined into standard ops."""
    return onnx.inliner.inline_local_functions(model)


def reduce_precision(model: onnx.ModelProto, precision: str, calibration: ExampleSet | None) -> onnx.ModelProto:
    """``model`` (float32, standard ops) converted to ``precision`` with ONNX Runtime's tools;
    ``calibration`` examples are needed for ``int8``."""
    check_precision(precision)
    if precision == "fp32":
        return model
    if precision == "fp16":
        return convert_float_to_float16(model, keep_io_types=True)
    if precision == "bf16":  # check_precision refused it without a GPU
        raise ExportError("precision bf16: this flowserve build converts to bfloat16 only where a CUDA GPU "
                          "has been validated; use fp16")
    if precision == "int8" and (calibration is None or not calibration.batches):
        raise ExportError("precision int8 calibrates on the saved directory's examples and it has none: "
                          "save the graph with flow.save(graph, dir, examples=...) (a DataLoader of real "
                          "inputs), or use --precision int8-dynamic")
    with tempfile.TemporaryDirectory(prefix="flowserve-quant-") as tmp:
        source, prepared, output = Path(tmp, "fp32.onnx"), Path(tmp, "prepared.onnx"), Path(tmp, "q.onnx")
        onnx.save_model(model, str(source))
        root = logging.getLogger()
        root.addFilter(_drop_preprocessing_advice)
        try:
            if precision == "int8":
                quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
                quantize_static(str(prepared), str(output), ExampleCalibrationReader(calibration),
                                quant_format=QuantFormat.QDQ, per_channel=True,
                                activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
            else:
                quantize_dynamic(str(source), str(output), per_channel=True, weight_type=QuantType.QInt8)
        finally:
            root.removeFilter(_drop_preprocessing_advice)
        return onnx.load_model(str(output))


def _drop_preprocessing_advice(record: logging.LogRecord) -> bool:
    """The quantizer logs advice on the root logger: pre-processing (flowserve has done
    it) and weights it cannot quantize per channel (LayerNorm's 1-D scales, kept per tensor)."""
    message = record.getMessage()
    return "pre-processing" not in message and "is out-of-range for weight" not in message
