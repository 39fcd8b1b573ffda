"""Which shape of ONNX a compiled graph is lowered to, and the lowering call itself.

The IR is the same everywhere; the lowering has the shape its target wants
(``lowering_target``):

- ``"cpu"``: ONNX Runtime's CPU provider (many small ops, NCHWc blocks, its batch-norm
  kernel; a training graph keeps its dynamic batch);
- ``"cuda"``: ONNX Runtime's CUDA provider: as few nodes as there are kernels, and a
  training graph lowered at its static batch size (no Shape arithmetic on the device; another
  batch size compiles another entry);
- ``"standard"``: other engines (OpenVINO): standard operators.

The target follows the provider the session will run on, or the graph option
``"lowering"`` where it is set (``"cuda"``: the CUDA shape run wherever the session runs,
which is how a machine without a GPU checks the CUDA lowering's numbers on ONNX Runtime's CPU
provider; ``bench/graph_nodes.py`` reads the same function).
"""

from __future__ import annotations

from flowserve.nn.graph.passes import lowering_ir
from flowserve.onnx_backend import lower, providers, runtime

TARGETS = ("cpu", "cuda", "standard")


def lowering_target(options: dict, device: str) -> str:
    """The lowering's shape for a session made with ``options`` on ``device`` ("cpu"/"cuda")."""
    forced = options.get("lowering", "auto")
    if forced != "auto":
        if forced not in TARGETS:
            raise ValueError(f"graph option 'lowering' must be 'auto' or one of {TARGETS}, got {forced!r}")
        return forced
    if providers.runs_on_cpu_provider(options, device):
        return "cpu"
    entry = providers.PROVIDERS.get(options.get("execution_provider", "auto"))  # None: "auto", ONNX Runtime's
    return "cuda" if entry is None or "cuda" in entry.devices else "standard"


def static_batch(training: bool, options: dict, device: str) -> bool:
    """Whether a graph is lowered at its traced batch size whatever the caller asked:
    training graphs for the CUDA target (each Shape node there is a host round trip)."""
    return training and lowering_target(options, device) == "cuda"


def lower_traced(traced, training: bool, options: dict, fed: list, baked: dict, *, device: str,
                 dynamic_batch: bool, dynamic_dims: dict | None = None):
    """The ONNX model of ``traced`` for a session made with ``options`` on ``device``:
    ``fed`` state fed per call, ``baked`` state written as initializers, the updated state
    returned as ``<name>:new`` outputs."""
    target = lowering_target(options, device)
    ir, fused = lowering_ir(traced.ir, options, training=training, constants=traced.constants, cuda=target == "cuda")
    if fused:  # constants a fusion took as attributes (attention's scale) are no initializers
        read = {name for node in ir.nodes for name in node.inputs} | {v.name for v in ir.outputs}
        baked = {k: v for k, v in baked.items() if k in read}
    cpu = target == "cpu"
    # fed weights: ONNX Runtime's CPU provider blocks no convolution on its own
    blocked = cpu and training and options.get("cpu_blocked_kernels", True)
    return lower.lower_ir(ir, baked, state_inputs=fed, state_outputs=list(traced.ir.updates),
                          dynamic_batch=dynamic_batch and not static_batch(training, options, device),
                          cpu_provider=cpu, cuda_provider=target == "cuda",
                          nchwc_block=runtime.nchwc_block_size() if blocked else 0,
                          batch_norm_kernel=options.get("cpu_batch_norm_kernel", True),
                          dynamic_dims=dynamic_dims)
