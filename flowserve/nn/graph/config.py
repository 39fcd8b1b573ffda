"""``GraphConfig``: the options of one nn.Graph (``graph.config``)."""

from __future__ import annotations


class GraphConfig:
    """Options of an ``nn.Graph``, set in its ``__init__`` (``self.config.enable_amp(True)``)."""

    def __init__(self):
        self.training = False
        self.options: dict = {}

    def _set(self, key: str, value) -> None:
        self.options[key] = value

    def enable_amp(self, mode: bool = True, *, dtype=None) -> None:
        from flowserve import dtypes

        self._set("amp", bool(mode))
        self._set("amp_dtype", dtypes.as_dtype(dtype).name if dtype is not None else "float16")

    def set_gradient_accumulation_steps(self, value: int) -> None:
        if int(value) < 1:
            raise ValueError(f"gradient accumulation steps must be >= 1, got {value}")
        self._set("gradient_accumulation_steps", int(value))

    def allow_fuse_model_update_ops(self, mode: bool = True) -> None:
        self._set("fuse_model_update_ops", bool(mode))

    def allow_fuse_add_to_output(self, mode: bool = True) -> None:
        self._set("fuse_add_to_output", bool(mode))

    def allow_fuse_cast_scale(self, mode: bool = True) -> None:
        self._set("fuse_cast_scale", bool(mode))

    def enable_cudnn_conv_heuristic_search_algo(self, mode: bool = True) -> None:
        self._set("cudnn_conv_heuristic_search_algo", bool(mode))

    def enable_straighten_algorithm(self, mode: str = "MemoryFirst") -> None:
        self._set("straighten_algorithm", mode)

    def enable_compress_memory(self, mode: bool = True) -> None:
        self._set("compress_memory", bool(mode))

    def enable_zero(self, mode: bool = True, *, stage: int = 1, shard_min_size: int = 1024,
                    shard_restore_level: int = 1) -> None:
        if stage not in (1, 2, 3):
            raise ValueError(f"ZeRO stage must be 1, 2 or 3, got {stage}")
        self._set("zero", {"enabled": bool(mode), "stage": stage, "shard_min_size": shard_min_size,
                           "shard_restore_level": shard_restore_level})

    def set_outputs_buffer_size(self, value: int = 2) -> None:
        if int(value) < 1:
            raise ValueError(f"outputs buffer size must be >= 1, got {value}")
        self._set("outputs_buffer_size", int(value))

    def __repr__(self) -> str:
        items = "".join(f"{k}={v}, " for k, v in [("training", self.training)] + sorted(self.options.items()))
        return f"GraphConfig({items})"
