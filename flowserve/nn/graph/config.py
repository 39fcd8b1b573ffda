"""``GraphConfig``: the options of one nn.Graph (``graph.config``), each one doing work:

- ``enable_amp``: the AMP pass (``flowserve.ir.passes.amp``) runs matmuls/convolutions in
  float16/bfloat16 with float32 master weights; a grad scaler scales the loss;
- ``set_gradient_accumulation_steps(n)``: one call runs ``n`` micro-batches split from
  dim 0, accumulating gradients (loss scaled by ``1/n``), then updates once;
- ``allow_fuse_model_update_ops``: one flat update per parameter group;
- ``allow_fuse_add_to_output``: an add into a matmul/conv output becomes its bias/output;
- ``allow_fuse_cast_scale``: cast round trips and cast+scale chains collapse;
- ``allow_fused_attention``: inference graphs on ONNX Runtime run each multi-head attention
  as its one fused kernel (on by default);
- ``enable_straighten_algorithm`` / ``enable_compress_memory``: the runtime's execution
  order and memory planning (``flowserve.onnx_backend.runtime.session_options``);
- ``enable_cudnn_conv_heuristic_search_algo``: the CUDA provider's conv algorithm search;
- ``enable_zero`` (and ``GraphModule.set_stage``): across launched processes, sharded
  optimizer state (and pipeline stages), see ``flowserve.distributed``; in one process
  they are recorded in the IR and change no result;
- ``set_outputs_buffer_size``: how many output buffers the calls of a graph that updates
  state rotate through;
- ``set_execution_provider``: the engine that runs the graph (ONNX Runtime CPU/CUDA, OpenVINO,
  or the faster of them, measured);
- ``allow_cpu_blocked_kernels``: training graphs on ONNX Runtime's CPU provider run their
  eligible convolutions with its blocked (NCHWc) kernels (on by default);
- ``allow_stacked_weight_gradient``: a convolution weight gradient rewritten as matrix
  products multiplies its stacked kernel taps once (on by default), else once per tap;
- ``allow_cpu_batch_norm_kernel``: training graphs on ONNX Runtime's CPU provider compute
  batch norm's statistics and output with its training-mode ``BatchNormalization`` (on by
  default), else with standard reductions and elementwise operators;
- ``allow_thread_spinning``: the runtime's threads spin between operators instead of
  sleeping (off by default);
- ``enable_qat`` / ``set_qat_config``: quantization-aware training, the graph's modules
  prepared with ``flowserve.ao.quantization.prepare_qat`` before the first trace.
"""

from __future__ import annotations

from flowserve import dtypes
from flowserve.onnx_backend import providers

STRAIGHTEN_MODES = ("Disable", "SpeedFirst", "MemoryFirst", "OverlapCpuGpu", "DelayShortGpu")


class GraphConfig:
    """Options of an ``nn.Graph``, set in its ``__init__`` (``self.config.enable_amp(True)``).

    >>> import flowserve as flow
    >>> config = flow.nn.graph.GraphConfig()
    >>> config.set_gradient_accumulation_steps(4)
    >>> config
    GraphConfig(training=False, gradient_accumulation_steps=4, )
    """

    def __init__(self):
        self._training = False
        self.options: dict = {}

    @property
    def training(self) -> bool:
        return self._training

    def _train(self, mode: bool = True) -> None:
        self._training = bool(mode)

    @property
    def gradient_accumulation_steps(self) -> int:
        return self.options.get("gradient_accumulation_steps", 1)

    @property
    def outputs_buffer_size(self) -> int:
        return self.options.get("outputs_buffer_size", 2)

    def _set(self, key: str, value) -> None:
        self.options[key] = value

    def enable_amp(self, mode: bool = True, *, dtype=None) -> None:
        """Mixed precision: compute-bound ops in ``dtype`` (float16 default, or bfloat16)."""
        name = dtypes.as_dtype(dtype).name if dtype is not None else "float16"
        if name not in ("float16", "bfloat16"):
            raise ValueError(f"enable_amp expects dtype flowserve.float16 or flowserve.bfloat16, got {name}")
        self._set("amp", bool(mode))
        self._set("amp_dtype", name)

    def set_gradient_accumulation_steps(self, value: int) -> None:
        """Accumulate gradients over ``value`` micro-batches (split from dim 0) per call."""
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"gradient accumulation steps must be an int >= 1, got {value!r}")
        self._set("gradient_accumulation_steps", value)

    def allow_fuse_model_update_ops(self, mode: bool = True) -> None:
        self._set("fuse_model_update_ops", bool(mode))

    def allow_fuse_add_to_output(self, mode: bool = True) -> None:
        self._set("fuse_add_to_output", bool(mode))

    def allow_fuse_cast_scale(self, mode: bool = True) -> None:
        self._set("fuse_cast_scale", bool(mode))

    def allow_fused_attention(self, mode: bool = True) -> None:
        """Inference graphs on ONNX Runtime (its CPU or CUDA provider): each multi-head
        attention (``nn.MultiheadAttention``, the Transformer layers; with or without masks)
        runs as ONNX Runtime's ``com.microsoft.MultiHeadAttention`` kernel instead of about
        fifteen operators (``flowserve.ir.passes.fuse_attention``). On by default; off lowers the
        standard operators. Training graphs, OpenVINO, attention weights returned
        (``need_weights=True``) and dropout applied keep the standard form; saved graphs and
        exported models are the same either way."""
        self._set("fused_attention", bool(mode))

    def enable_cudnn_conv_heuristic_search_algo(self, mode: bool = True) -> None:
        self._set("cudnn_conv_heuristic_search_algo", bool(mode))

    def enable_straighten_algorithm(self, mode: str = "MemoryFirst") -> None:
        """Execution order of the graph's ops: ``"SpeedFirst"``, ``"MemoryFirst"`` (default),
        ``"OverlapCpuGpu"``, ``"DelayShortGpu"`` or ``"Disable"``."""
        if mode not in STRAIGHTEN_MODES:
            raise ValueError(f"enable_straighten_algorithm expects one of {STRAIGHTEN_MODES}, got {mode!r}")
        self._set("straighten_algorithm", mode)

    def enable_compress_memory(self, mode: bool = True) -> None:
        self._set("compress_memory", bool(mode))

    def enable_zero(self, mode: bool = True, *, stage: int = 1, shard_min_size: int = 1024,
                    shard_restore_level: int = 1) -> None:
        """ZeRO redundancy optimizer: stage 1 shards the optimizer state over the processes of
        a launched run, stage 2 the reduced gradients too (one process shards nothing)."""
        if stage not in (1, 2, 3):
            raise ValueError(f"ZeRO stage must be 1, 2 or 3, got {stage!r}")
        if not isinstance(shard_min_size, int) or shard_min_size < 1:
            raise ValueError(f"ZeRO shard_min_size must be a positive int, got {shard_min_size!r}")
        if shard_restore_level not in (0, 1, 2):
            raise ValueError(f"ZeRO shard_restore_level must be 0, 1 or 2, got {shard_restore_level!r}")
        self._set("zero", {"enabled": bool(mode), "stage": stage, "shard_min_size": shard_min_size,
                           "shard_restore_level": shard_restore_level})

    def set_execution_provider(self, provider: str = "auto") -> None:
        """The engine that runs the compiled graph: ``"auto"`` (the default: ONNX Runtime —
        CUDA where usable, else its CPU provider — and, where OpenVINO is installed, the
        faster of the two for this graph on this machine, measured at the second call and
        cached: ``flowserve.nn.graph.provider_choice``), ``"cpu"``, ``"cuda"`` or ``"openvino"``
        (OpenVINO through ONNX Runtime's plugin, else OpenVINO's own runtime;
        ``pip install "flowserve[openvino]"``; a training graph on which it is 3x slower
        than ONNX Runtime or more warns once): the providers of the table that train
        (``flowserve.onnx_backend.providers``; ``"tensorrt"`` serves only). Outputs stay
        within eager mode's tolerance on each."""
        self._set("execution_provider", providers.check(provider, graph=True))

    def allow_cpu_blocked_kernels(self, mode: bool = True) -> None:
        """Training graphs on ONNX Runtime's CPU provider: 3x3 (and larger) convolutions
        whose channels fill its NCHWc blocks run its blocked kernels, the weight reordered
        in the graph each step (``flowserve.onnx_backend.lowering.conv``). On by default; off
        lowers standard ONNX ``Conv`` only. Saved and exported models are standard ONNX
        either way."""
        self._set("cpu_blocked_kernels", bool(mode))

    def allow_stacked_weight_gradient(self, mode: bool = True) -> None:
        """Training graphs: a convolution's weight gradient with a large kernel and few output
        positions is rewritten as matrix products of its kernel taps
        (``flowserve.ir.passes.conv_weight_grad``); on (the default) the taps are stacked into
        one matrix and multiplied once, off each tap is multiplied on its own. Both give
        eager mode's gradients up to float rounding; ``bench/profile_ort_ops.py`` times them."""
        self._set("stacked_weight_gradient", bool(mode))

    def allow_cpu_batch_norm_kernel(self, mode: bool = True) -> None:
        """Training graphs on ONNX Runtime's CPU provider: batch norm's batch statistics and
        output come from the provider's ``BatchNormalization`` in training mode
        (``flowserve.onnx_backend.lowering.norm``; on by default); off lowers them as two
        ``ReduceMean`` and elementwise operators. Saved and exported models are the same
        either way."""
        self._set("cpu_batch_norm_kernel", bool(mode))

    def allow_thread_spinning(self, mode: bool = True) -> None:
        """ONNX Runtime's threads spin between operators (``session.intra_op.allow_spinning``)
        instead of sleeping. Off by default. On cores the graph has to itself it saves the
        wake-up at each operator (MLP step on 2 cores: 8.1 -> 6.1 ms median); on shared,
        busy cores the spinning threads take the time their siblings need (MobileNetV2
        training step at load 6 on 2 cores: 284 -> 621 ms)."""
        self._set("thread_spinning", bool(mode))

    def enable_qat(self, mode: bool = True) -> None:
        """Quantization-aware training: before the first call traces ``build()``, the graph's
        modules are prepared with ``flowserve.ao.quantization.prepare_qat`` (in place, so eager
        calls of the module train the same way), with the settings of ``set_qat_config``."""
        self._set("qat", bool(mode))

    def set_qat_config(self, per_channel_weight_quantization: bool = True, symmetric: bool = True,
                       moving_min_max_momentum: float = 0.99, moving_min_max_stop_update_after_iters=None,
                       target_backend: str = "onnxruntime", freeze_bn_after=None) -> None:
        """OneFlow's QAT settings: weights per output channel (or per tensor), symmetric (the
        int8 export's weights are), activations' moving min/max ``new = m * old + (1 - m) *
        batch`` with momentum ``m`` (PyTorch's default 0.99), frozen after
        ``moving_min_max_stop_update_after_iters`` calls (None: never); ``freeze_bn_after``:
        fused conv+BatchNorm layers normalise with their running statistics after that many
        calls. ``target_backend``: ``"onnxruntime"`` (what ``flowserve export`` deploys to)."""
        if not symmetric:
            raise ValueError("set_qat_config expected symmetric=True: the int8 export's weights are symmetric "
                             "int8 (activations are affine uint8 either way)")
        if target_backend not in ("onnxruntime", ""):
            raise ValueError(f"set_qat_config expected target_backend 'onnxruntime', got {target_backend!r}")
        if not 0.0 <= moving_min_max_momentum < 1.0:
            raise ValueError(f"set_qat_config expected moving_min_max_momentum in [0, 1), got {moving_min_max_momentum!r}")
        for name, value in (("moving_min_max_stop_update_after_iters", moving_min_max_stop_update_after_iters),
                            ("freeze_bn_after", freeze_bn_after)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"set_qat_config expected {name} None or an int >= 0, got {value!r}")
        self._set("qat_config", {"per_channel_weight_quantization": bool(per_channel_weight_quantization),
                                 "moving_min_max_momentum": float(moving_min_max_momentum),
                                 "moving_min_max_stop_update_after_iters": moving_min_max_stop_update_after_iters,
                                 "freeze_bn_after": freeze_bn_after})

    def set_outputs_buffer_size(self, value: int = 2) -> None:
        """Number of output buffers the calls of a graph that updates state (a training step)
        rotate through (default 2); outputs are copied out of them. An inference graph takes
        the outputs the runtime allocates for each call."""
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"outputs buffer size must be an int >= 1, got {value!r}")
        self._set("outputs_buffer_size", value)

    def __repr__(self) -> str:
        items = "".join(f"{k}={v}, " for k, v in [("training", self.training)] + sorted(self.options.items()))
        return f"GraphConfig({items})"
