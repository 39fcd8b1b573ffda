"""The ``quantization`` field of a saved graph's manifest: where a quantization-aware
trained graph keeps what it learned. Each fake-quantized tensor of the inference graph is
listed with the names of its scale and zero point in ``params.safetensors`` and its integer
range; ``flowserve export --precision int8`` deploys with them instead of calibrating.
Checked on load: every named tensor is in ``params.safetensors``, ranges hold 0.
(``flowserve.serialization.quantization_record`` makes the record from a graph's IR.)
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

from flowserve.errors import SavedGraphError


class QuantizedTensor(BaseModel):
    """One fake-quantized value: its scale and zero point (state names), range and axis."""

    model_config = ConfigDict(extra="forbid")
    value: str = Field(max_length=512)
    scale: str = Field(max_length=512)
    zero_point: str = Field(max_length=512)
    quant_min: int
    quant_max: int
    axis: Optional[int] = Field(None, ge=-32, le=31)

    @model_validator(mode="after")
    def _range(self) -> "QuantizedTensor":
        if not self.quant_min <= 0 <= self.quant_max or self.quant_min == self.quant_max:
            raise ValueError(f"{self.value[:80]!r}: range ({self.quant_min}, {self.quant_max}) does not hold 0")
        return self


class QuantizationRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    scheme: Literal["qat"] = "qat"
    tensors: list[QuantizedTensor]


def check_quantization(record: Optional[QuantizationRecord], params: dict, where) -> None:
    """Every scale and zero point the record names is a saved tensor."""
    if record is None:
        return
    for t in record.tensors:
        for name in (t.scale, t.zero_point):
            if name not in params:
                raise SavedGraphError(f"{where}: quantization names {name[:80]!r} for {t.value[:80]!r}, "
                                      "which params.safetensors does not hold")
