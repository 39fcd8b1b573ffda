"""``flowserve.json``: the manifest of a saved graph directory, validated with pydantic."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from flowserve.errors import SavedGraphError
from flowserve.format.quantization import QuantizationRecord

FORMAT_VERSION = 3  # 2: the manifest lists the reference examples (examples/); 3: dynamic_dims
BASE_VERSION = 2
NAMED_DIMS_VERSION = 3  # written only by saves with named dynamic dims: others stay readable by version 2
DIM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
MANIFEST = "flowserve.json"
GRAPH_FILE = "graph.json"
PARAMS_FILE = "params.safetensors"
MAX_DIM, MAX_RANK = 2**31 - 1, 32  # ONNX Runtime's int32 dims; numpy holds 64 dims at most
EXAMPLES_DIR = "examples"
FILE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")  # a plain file name inside examples/
DTYPE_NAMES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64")


class TensorSpec(BaseModel):
    """One input or output: name, dtype name, shape (-1 = dynamic)."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=256)
    dtype: Literal[DTYPE_NAMES]
    shape: list[int] = Field(max_length=MAX_RANK)

    @field_validator("shape")
    @classmethod
    def _dims(cls, shape: list[int]) -> list[int]:
        if any(d < -1 for d in shape):
            raise ValueError(f"dims must be >= 0 or -1 (dynamic), got {shape}")
        if any(d > MAX_DIM for d in shape) or len(shape) > MAX_RANK:
            raise ValueError(f"at most {MAX_RANK} dims of at most {MAX_DIM} each, got {shape}")
        return shape


class SavedGraphManifest(BaseModel):
    """What a saved directory holds and how to check it."""

    model_config = ConfigDict(extra="forbid")
    format_version: int = Field(ge=1)
    flowserve_version: str
    graph_name: str = Field(min_length=1, max_length=256)
    graph_class: str
    training: bool
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    config: dict = Field(default_factory=dict)
    batch_note: str | None = None  # why dim 0 is not dynamic, naming the op and line that fixed it
    # named dynamic dims shared across inputs and outputs: tensor name -> {axis: dim name}
    dynamic_dims: dict[str, dict[int, str]] = Field(default_factory=dict)
    files: dict[Literal["graph.json", "params.safetensors"], str]
    examples: dict[str, str] = Field(default_factory=dict)  # "examples/<file>" -> sha256
    quantization: Optional[QuantizationRecord] = None  # a QAT graph's scales (format/quantization.py)

    @field_validator("dynamic_dims")
    @classmethod
    def _dim_names(cls, dims: dict) -> dict:
        for tensor, axes in dims.items():
            for axis, name in axes.items():
                if axis < 0 or axis >= MAX_RANK or not DIM_NAME.match(name):
                    raise ValueError(f"{tensor[:80]!r}: axis {axis} named {name[:80]!r} (axes are 0..{MAX_RANK - 1}, "
                                     "names identifiers)")
        return dims

    @field_validator("examples")
    @classmethod
    def _example_files(cls, files: dict) -> dict:
        for name in files:
            folder, _, base = name.partition("/")
            if folder != EXAMPLES_DIR or not FILE_NAME.match(base):
                raise ValueError(f"example files are named {EXAMPLES_DIR}/<file name>, got {name[:80]!r}")
        return files


def check_inside(path: Path, directory) -> None:
    """Refuse ``path`` when it (a link, or a link on the way) leads out of ``directory``."""
    if not Path(path).resolve().is_relative_to(Path(directory).resolve()):
        raise SavedGraphError(f"{path}: a link to a file outside the saved directory (refused)")


def read_manifest(directory) -> SavedGraphManifest:
    """Read and validate ``DIR/flowserve.json``; errors name the file and the problem."""
    path = Path(directory) / MANIFEST
    if not Path(directory).is_dir():
        raise SavedGraphError(f"{directory}: not a directory (expected a saved graph directory with {MANIFEST})")
    if not path.is_file():
        raise SavedGraphError(f"{path}: missing (not a flowserve saved graph directory)")
    check_inside(path, directory)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SavedGraphError(f"{path}: not valid JSON ({exc})") from None
    except RecursionError:
        raise SavedGraphError(f"{path}: not valid JSON (nested too deeply)") from None
    if not isinstance(raw, dict):
        raise SavedGraphError(f"{path}: expected a JSON object, got {type(raw).__name__}")
    version = raw.get("format_version")
    if isinstance(version, int) and version > FORMAT_VERSION:
        raise SavedGraphError(
            f"{path}: saved with format version {version} (flowserve {raw.get('flowserve_version', '?')}); "
            f"this flowserve reads format versions up to {FORMAT_VERSION}: upgrade flowserve to load it")
    try:
        return SavedGraphManifest.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise SavedGraphError(f"{path}: invalid field {where!r}: {first['msg']}") from None
