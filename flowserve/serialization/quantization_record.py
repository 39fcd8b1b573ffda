"""The manifest's ``quantization`` record (``flowserve.format.quantization``) of a graph's IR."""

from __future__ import annotations

from typing import Optional

from flowserve.format.quantization import QuantizationRecord, QuantizedTensor
from flowserve.ir.graph import GraphIR

FAKE_QUANT = "fake_quant"


def quantization_record(ir: GraphIR) -> Optional[QuantizationRecord]:
    """The record of ``ir``'s fake-quantized values, or None where it has none."""
    tensors = [QuantizedTensor(value=n.inputs[0], scale=n.inputs[1], zero_point=n.inputs[2],
                               quant_min=n.attrs["quant_min"], quant_max=n.attrs["quant_max"],
                               axis=n.attrs.get("axis"))
               for n in ir.nodes if n.op == FAKE_QUANT]
    return QuantizationRecord(tensors=tensors) if tensors else None
