"""A model's ``config.json``: batching, instances, device, versions, warmup.

Every field is optional; missing ones take the server's defaults
(``ServerSettings``), so a model needs no config at all. Unknown keys are
errors that name the key::

    {"max_batch_size": 32,
     "dynamic_batching": {"max_queue_delay_us": 200, "preferred_batch_size": [8, 16],
                          "max_queue_size": 512, "default_timeout_us": 1000000},
     "instance_count": 2, "device": "cpu", "intra_op_threads": 1, "cpu_policy": "fixed",
     "version_policy": {"policy": "specific", "versions": [1, 3]},
     "warmup": {"batch_sizes": [1, 8]}}
"""

from __future__ import annotations

import json
import pathlib
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .errors import ModelLoadError
from .settings import CpuPolicy, ServerSettings

CONFIG_FILE = "config.json"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DynamicBatching(_Strict):
    """How requests are merged into batches."""

    max_queue_delay_us: Optional[int] = Field(None, ge=0)
    preferred_batch_size: list[int] = Field(default_factory=list)
    max_queue_size: Optional[int] = Field(None, ge=1)
    default_timeout_us: Optional[int] = Field(None, ge=0)


class VersionPolicy(_Strict):
    """Which numeric version folders are served: latest N, all, or specific ones."""

    policy: Literal["latest", "all", "specific"] = "latest"
    num_versions: int = Field(1, ge=1)
    versions: list[int] = Field(default_factory=list)

    def select(self, available: list[int]) -> list[int]:
        """The versions of ``available`` this policy serves, ascending."""
        ordered = sorted(available)
        if self.policy == "all":
            return ordered
        if self.policy == "specific":
            return [v for v in ordered if v in self.versions]
        return ordered[-self.num_versions :]


class Warmup(_Strict):
    """Batch sizes run once on every instance (zero-filled inputs) before ready. Without
    this section a model with reference examples is warmed up by verifying them."""

    batch_sizes: list[int] = Field(default_factory=lambda: [1])


class ModelConfigFile(_Strict):
    """The contents of ``repo/<model>/config.json``."""

    max_batch_size: Optional[int] = Field(None, ge=0)
    dynamic_batching: DynamicBatching = Field(default_factory=DynamicBatching)
    instance_count: Optional[int] = Field(None, ge=1)
    device: Optional[Literal["auto", "cpu", "cuda"]] = None
    intra_op_threads: Optional[int] = Field(None, ge=0)
    cpu_policy: Optional[CpuPolicy] = None
    version_policy: VersionPolicy = Field(default_factory=VersionPolicy)
    warmup: Warmup = Field(default_factory=Warmup)

    @model_validator(mode="after")
    def _sessions_not_fixed(self) -> "ModelConfigFile":
        if self.cpu_policy == "wide-narrow" and self.fixes_sessions:
            raise ValueError("wide-narrow chooses the sessions and their threads itself; leave "
                             "instance_count and intra_op_threads unset, or use fixed")
        return self

    @property
    def fixes_sessions(self) -> bool:
        """Whether this file sets the instances or their threads."""
        return self.instance_count is not None or bool(self.intra_op_threads)


class ResolvedModelConfig(_Strict):
    """A model's settings after defaults: what the model actually runs with."""

    max_batch_size: int
    max_queue_delay_us: int
    preferred_batch_size: list[int]
    max_queue_size: int
    default_timeout_us: int
    instance_count: int
    device: str
    provider: str
    cudnn_benchmark: bool = False
    intra_op_threads: int = 0  # 0: chosen at load (one thread for a model whose runs are short)
    cpu_policy: CpuPolicy = "auto"  # "auto": wide-narrow for a CPU model whose runs are long
    version_policy: VersionPolicy
    warmup_batch_sizes: list[int]
    warmup_from_examples: bool = True  # no warmup in config.json: the verification runs are the warmup


def read_config(model_dir: pathlib.Path) -> ModelConfigFile:
    """Parse ``model_dir/config.json`` (defaults when absent); errors name the file."""
    path = model_dir / CONFIG_FILE
    if not path.is_file():
        return ModelConfigFile()
    try:
        return ModelConfigFile.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"{path}: not valid JSON ({exc})") from None
    except RecursionError:
        raise ModelLoadError(f"{path}: not valid JSON (nested too deeply)") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        where = f"{field}: " if field else ""  # a check across fields names none
        raise ModelLoadError(f"{path}: {where}{first['msg']}") from None


def resolve(config: ModelConfigFile, settings: ServerSettings) -> ResolvedModelConfig:
    """Fill ``config``'s unset fields from the server ``settings``."""
    batching = config.dynamic_batching

    def pick(value, default):
        return default if value is None else value

    return ResolvedModelConfig(
        max_batch_size=pick(config.max_batch_size, settings.max_batch_size),
        max_queue_delay_us=pick(batching.max_queue_delay_us, settings.max_queue_delay_us),
        preferred_batch_size=sorted(batching.preferred_batch_size),
        max_queue_size=pick(batching.max_queue_size, settings.max_queue_size),
        default_timeout_us=pick(batching.default_timeout_us, settings.default_timeout_us),
        instance_count=pick(config.instance_count, pick(settings.instances, 1)),
        device=pick(config.device, settings.device),
        provider=settings.provider,
        cudnn_benchmark=settings.cudnn_benchmark,
        intra_op_threads=pick(config.intra_op_threads, settings.intra_op_threads),
        cpu_policy=_cpu_policy(config, settings),
        version_policy=config.version_policy,
        warmup_batch_sizes=config.warmup.batch_sizes,
        warmup_from_examples="warmup" not in config.model_fields_set,
    )


def _cpu_policy(config: ModelConfigFile, settings: ServerSettings) -> str:
    """The policy ``config.json`` names, else ``fixed`` where it sets the instances or their
    threads; then the same from the server's settings; else ``auto``."""
    fixes_server = settings.instances is not None or bool(settings.intra_op_threads)
    for policy, fixes in ((config.cpu_policy, config.fixes_sessions),
                          (settings.cpu_policy, fixes_server)):
        if policy not in (None, "auto"):
            return policy
        if fixes:
            return "fixed"
    return "auto"
