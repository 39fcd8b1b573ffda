"""Reduced-precision variants of an exported model, made with ONNX Runtime's own tools.

* ``int8``: ``onnxruntime.quantization.quantize_static`` in QDQ format, weights int8 per
  channel in 7 bits (``reduce_range``, see ``REDUCE_RANGE``), activations uint8 (the U8S8
  kernels x86 CPUs run fastest), calibrated (min-max)
  on the stored example inputs through a ``CalibrationDataReader``, after ONNX Runtime's
  ``quant_pre_process`` (shape inference and graph optimisation), with the batch laid out
  as one image around the pointwise convolutions (``exporter/batch_rows.py``: ONNX
  Runtime's ``QLinearConv`` runs the images of a batch one after another, so 1x1
  convolutions on small feature maps would otherwise be one tiny GEMM per image), and
  each convolution on an image's 3 colour channels given a fourth, of zeros, after
  quantization (``exporter/conv_channels.py``: ONNX Runtime's symmetric int8 kernels take
  input channels in multiples of 4);
  A graph trained with quantization-aware training (``flowserve.ao.quantization``) exports
  as QDQ with the scales it learned: no calibration (``exporter/qat.py``), the batch folded
  and the channels padded the same way where it is quantized;
* ``int8-dynamic``: ``quantize_dynamic``: int8 weights (7 bits, as above), activations quantized per call
  (MatMul-heavy models such as transformers; needs no calibration), self-attention's Q, K
  and V projections packed into one ``Attention`` first, which it makes ``QAttention``
  (``exporter/packed_attention.py``);
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

import numpy as np
import onnx
import onnx.inliner
from onnx import helper, numpy_helper
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static
from onnxruntime.quantization.shape_inference import quant_pre_process
from onnxruntime.transformers.float16 import convert_float_to_float16

from flowserve.errors import ExportError
from flowserve.exporter.batch_rows import fold_batch_into_rows
from flowserve.exporter.conv_channels import pad_input_channels
from flowserve.exporter.packed_attention import drop_unused_initializers, pack_self_attention
from flowserve.exporter.qat import is_quantized, quantize_biases
from flowserve.onnx_backend.runtime import cuda_usable
from flowserve.format.examples import ExampleSet

PRECISIONS = ("fp32", "int8", "int8-dynamic", "fp16", "bf16")
# Weights in 7 bits: x86 CPUs without VNNI (AVX2 and AVX-512F, e.g. AMD EPYC before Zen 4)
# multiply uint8 activations by int8 weights with vpmaddubsw, whose pairwise int16 sums
# saturate for 8-bit weights (2 * 255 * 127 > 32767): a deployment exported anywhere must
# compute the same numbers wherever it is served. Measured on an AVX2 EPYC: MobileNetV2's
# top-1 agreement 81% -> 100%, ResNet-18's max relative error 0.045 -> 0.003.
REDUCE_RANGE = True
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


def plain_weight_matmuls(model: onnx.ModelProto) -> onnx.ModelProto:
    """``com.microsoft.FusedMatMul`` nodes that only multiply by a weight (no alpha, no
    transposed A) become ``MatMul`` with the weight stored transposed where ``transB``
    asked for it: the dynamic quantizer knows ``MatMul``, not ``FusedMatMul``."""
    weights = {t.name: t for t in model.graph.initializer}
    added = {}
    for node in model.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if (node.op_type != "FusedMatMul" or node.domain != "com.microsoft" or node.input[1] not in weights
                or set(attrs) - {"transB", "alpha", "transA"} or attrs.get("alpha", 1.0) != 1.0
                or attrs.get("transA", 0)):
            continue
        name = node.input[1]
        if attrs.get("transB", 0):
            if name not in added:
                array = numpy_helper.to_array(weights[name])
                added[name] = numpy_helper.from_array(np.ascontiguousarray(np.swapaxes(array, -1, -2)), name + "_T")
            node.input[1] = name + "_T"
        node.op_type, node.domain = "MatMul", ""
        del node.attribute[:]
    model.graph.initializer.extend(added.values())
    drop_unused_initializers(model.graph)
    return model


def base_target(precision: str, target: str) -> str:
    """The export target a precision starts from: static int8 and fp16 need standard ops
    (the portable target, functions inlined); dynamic int8 keeps ONNX Runtime's fused
    attention, LayerNorm and GELU kernels and quantizes the weight MatMuls around them."""
    if precision == "fp32":
        return target
    return "onnxruntime" if precision == "int8-dynamic" else "portable"


def prepare(model: onnx.ModelProto, precision: str) -> onnx.ModelProto:
    """The float32 export made ready for ``precision``'s tool (see ``base_target``); for
    int8-dynamic, weight products as ``MatMul`` and self-attention as one packed
    ``Attention``, the forms ``quantize_dynamic`` quantizes."""
    model = inline_functions(model)
    if precision != "int8-dynamic":
        return model
    return pack_self_attention(plain_weight_matmuls(model))


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
    if precision == "int8" and is_quantized(model):  # quantization-aware trained: scales learned
        return pad_input_channels(fold_batch_into_rows(quantize_biases(model)))
    if precision == "int8" and (calibration is None or not calibration.batches):
        raise ExportError("precision int8 calibrates on the saved directory's examples and it has none: "
                          "save the graph with flow.save(graph, dir, examples=...) (a DataLoader of real "
                          "inputs), or use --precision int8-dynamic")
    with tempfile.TemporaryDirectory(prefix="flowserve-quant-") as tmp:
        source, prepared, output = Path(tmp, "fp32.onnx"), Path(tmp, "prepared.onnx"), Path(tmp, "q.onnx")
        onnx.save_model(fold_batch_into_rows(model) if precision == "int8" else model, str(source))
        root = logging.getLogger()
        root.addFilter(_drop_preprocessing_advice)
        try:
            if precision == "int8":
                quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
                quantize_static(str(prepared), str(output), ExampleCalibrationReader(calibration),
                                quant_format=QuantFormat.QDQ, per_channel=True,
                                activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                                reduce_range=REDUCE_RANGE)
            else:  # the model may hold com.microsoft ops, which shape inference does not type
                quantize_dynamic(str(source), str(output), per_channel=True, weight_type=QuantType.QInt8,
                                 reduce_range=REDUCE_RANGE,
                                 extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
        finally:
            root.removeFilter(_drop_preprocessing_advice)
        quantized = onnx.load_model(str(output))
        return pad_input_channels(quantized) if precision == "int8" else quantized


def _drop_preprocessing_advice(record: logging.LogRecord) -> bool:
    """The quantizer logs advice on the root logger: pre-processing (flowserve has done
    it) and weights it cannot quantize per channel (LayerNorm's 1-D scales, kept per tensor)."""
    message = record.getMessage()
    return "pre-processing" not in message and "is out-of-range for weight" not in message
