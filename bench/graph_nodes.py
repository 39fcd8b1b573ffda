"""The shape of nn.Graph's CUDA training lowering, measured on the CPU (nothing runs on a GPU).

For the models of ``bench/bench_gpu_training.py`` (ResNet-50 and MobileNetV2 at 224x224
batch 64, the Transformer encoder at batch 32 x 512 tokens), the training step (forward,
cross-entropy, backward, SGD with momentum, ``bench_graph.TrainGraph``) is traced and
lowered as a graph on a CUDA device is (``flowserve.nn.graph.lowering.lower_traced`` with
device "cuda", provider "cuda"); the ONNX model is only counted, never run. Columns:

- ``nodes``: ONNX nodes of the step (float32); ``amp nodes``: with ``enable_amp(True)``
  and a ``GradScaler``;
- ``shape``: nodes on the shape path (``Shape`` and the integer arithmetic fed by it).
  ONNX Runtime places such nodes on its CPU provider (``GetCpuPreferredNodes``) in a way
  only a session on a GPU reports; every CPU-placed node of a training step is on this path,
  so 0 here means none;
- ``fp16/compute``: under AMP, Conv/ConvTranspose/MatMul/Gemm nodes with float16 inputs,
  of all of them; ``casts``: Cast nodes under AMP;
- ``aten``: PyTorch's top-level aten ops for the same float32 step (``torch.profiler`` on
  the CPU, foreach SGD with momentum, ``zero_grad(set_to_none=True)``), at batch 2: the op
  list of a step does not depend on the batch size; ``ratio``: nodes / aten.

    python bench/graph_nodes.py            # the three models (a few minutes on 2 cores)
    python bench/graph_nodes.py --smoke    # tiny sizes
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_graph  # noqa: E402  (sibling script: the training graph)
import bench_gpu_training as gpu  # noqa: E402  (sibling script: the GPU bench's models)
import flowserve as flow  # noqa: E402
import onnx  # noqa: E402
import torch  # noqa: E402
from flowserve.nn.graph.lowering import lower_traced  # noqa: E402
from flowserve.nn.graph.lifecycle import trace_and_rewrite  # noqa: E402

COMPUTE = ("Conv", "ConvTranspose", "MatMul", "Gemm")
TORCH_BATCH = 2


def cuda_step_model(spec, amp: bool) -> onnx.ModelProto:
    """The ONNX model of ``spec``'s training step as a CUDA graph lowers it."""
    model = gpu.build(spec, flow).train()
    graph = bench_graph.TrainGraph(model, flow.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), True, "cuda")
    if amp:
        graph.config.enable_amp(True)
        graph.set_grad_scaler(flow.amp.GradScaler())
    x, y = gpu.batch_of(spec)
    traced = trace_and_rewrite(graph, (flow.tensor(x), flow.tensor(y)), {})
    ir = traced.ir
    fed = [k for k in ir.state if ir.state_kinds[k] != "constant"]
    return lower_traced(traced, True, dict(graph.config.options), fed, dict(traced.constants), device="cuda",
                        dynamic_batch=True)


def shape_path(model: onnx.ModelProto) -> list:
    """``Shape`` nodes and the nodes that compute only from their results (and constants)."""
    consts = {i.name for i in model.graph.initializer}
    derived, path = set(), []
    for node in model.graph.node:
        inputs = [n for n in node.input if n and n not in consts]
        if node.op_type == "Shape" or (node.op_type != "Constant" and inputs and all(n in derived for n in inputs)):
            derived.update(node.output)
            path.append(node)
    return path


def float16_compute(model: onnx.ModelProto) -> tuple[int, int]:
    """(compute nodes with a float16 first input, compute nodes)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in
             list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output)}
    types.update({i.name: i.data_type for i in model.graph.initializer})
    compute = [n for n in model.graph.node if n.op_type in COMPUTE]
    return sum(types.get(n.input[0]) == onnx.TensorProto.FLOAT16 for n in compute), len(compute)


def torch_aten_ops(spec) -> int:
    """PyTorch's top-level aten ops of one float32 training step at batch ``TORCH_BATCH``."""
    torch.manual_seed(0)
    model = gpu.build(spec, torch).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=True)
    loss_fn = torch.nn.CrossEntropyLoss()
    x, y = gpu.batch_of(dataclasses.replace(spec, batch=TORCH_BATCH))
    x, y = torch.from_numpy(x), torch.from_numpy(y)

    def step():
        loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    step()  # the momentum buffers exist from the second step on, as in a timed step
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        step()
    events = prof.events()
    return sum(1 for e in events if e.name.startswith("aten::")
               and (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::")))


def row(spec) -> dict:
    fp32 = cuda_step_model(spec, amp=False)
    amp = cuda_step_model(spec, amp=True)
    half, compute = float16_compute(amp)
    aten = torch_aten_ops(spec)
    nodes = len(fp32.graph.node)
    return {"model": spec.name, "nodes": nodes, "shape": len(shape_path(fp32)), "amp nodes": len(amp.graph.node),
            "amp shape": len(shape_path(amp)), "fp16/compute": f"{half}/{compute}",
            "casts": sum(n.op_type == "Cast" for n in amp.graph.node), "aten": aten, "ratio": f"{nodes / aten:.2f}x"}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (every path, seconds)")
    parser.add_argument("--only", default="", help="comma-separated model names")
    args = parser.parse_args(argv)
    rows = [row(spec) for spec in gpu.specs(args.smoke) if not args.only or spec.name in args.only.split(",")]
    keys = list(rows[0])
    widths = {k: max(len(k), *(len(str(r[k])) for r in rows)) for k in keys}
    print("  ".join(k.rjust(widths[k]) for k in keys))
    for r in rows:
        print("  ".join(str(r[k]).rjust(widths[k]) for k in keys))


if __name__ == "__main__":
    main()
