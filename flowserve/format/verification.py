"""What a model is verified against: the criteria, and the examples beside an exported model.

``flowserve export --precision P`` writes ``<model>.examples/`` beside the model: the
reference examples (``flowserve.format.examples``) and ``verify.json`` (``VerifySpec``):
which model they belong to, its precision, the ``Criteria`` it is held to and the sha256
of every file. Export proves each model it writes on them; the server verifies its
sessions on them before it reports ready::

    spec, examples = read_sidecar(Path("resnet.int8.onnx"))   # or None without a sidecar
"""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from flowserve.errors import SavedGraphError
from flowserve.format.examples import ExampleSet, read_example_set

SIDECAR_SUFFIX = ".examples"
VERIFY_FILE = "verify.json"
# the relative tolerance export's parity check holds each output dtype to (float32 and
# float64: 1e-5); the loosest is the loosest a stored criterion may be
TOLERANCES = MappingProxyType({"float16": 1e-2, "bfloat16": 2e-2})


class Criteria(BaseModel):
    """What a model must reproduce on its examples. ``rtol``: every element within
    ``rtol * (max|ref| + |ref|)`` (full-precision models); ``min_agreement``: top-1
    agreement of classifier outputs (reduced precision); ``max_abs_err``: output name ->
    the largest absolute error allowed (reduced precision, from what export measured)."""

    model_config = ConfigDict(extra="forbid")
    rtol: Optional[float] = Field(None, gt=0, le=1)
    min_agreement: Optional[float] = Field(None, ge=0, le=1)
    max_abs_err: dict[str, float] = Field(default_factory=dict)

    def describe(self) -> str:
        parts = []
        if self.rtol is not None:
            parts.append(f"rtol {self.rtol:g}")
        if self.min_agreement is not None:
            parts.append(f"top-1 agreement >= {self.min_agreement:.1%}")
        if self.max_abs_err:
            parts.append("max abs err " + ", ".join(f"{k} <= {v:.3g}" for k, v in self.max_abs_err.items()))
        return "; ".join(parts) or "nothing"


class VerifySpec(BaseModel):
    """``<model>.examples/verify.json``: which model the examples belong to, its precision,
    the criteria it is held to, and the sha256 of every example file."""

    model_config = ConfigDict(extra="forbid")
    format_version: Literal[1] = 1
    model: str
    precision: str
    criteria: Criteria
    files: dict[str, str]
    source: str = ""
    forced: bool = False


def sidecar_path(model_path: Path) -> Path:
    """Where the examples of an exported model live: ``model.onnx`` -> ``model.examples/``."""
    model_path = Path(model_path)
    return model_path.with_name(model_path.stem + SIDECAR_SUFFIX)


def read_sidecar(model_path: Path) -> Optional[tuple[VerifySpec, ExampleSet]]:
    """The verification spec and examples beside an exported model, or None."""
    folder = sidecar_path(model_path)
    if not (folder / VERIFY_FILE).is_file():
        return None
    try:
        spec = VerifySpec.model_validate_json((folder / VERIFY_FILE).read_bytes())
    except ValueError as exc:
        raise SavedGraphError(f"{folder / VERIFY_FILE}: not a valid verification spec ({exc})") from None
    return spec, read_example_set(folder, spec.files)
