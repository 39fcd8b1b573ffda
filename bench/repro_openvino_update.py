"""OpenVINO's fused optimizer-update "Subgraph": the MobileNetV2 training step lowered with the
step written ``Add(p, Mul(d, Neg(lr)))`` (the optimizers' ``p + d * (-lr)``) and as
``Sub(p, Mul(d, lr))`` (``flowserve/onnx_backend/lowering/training.py``), compiled by OpenVINO's CPU plugin.

OpenVINO merges the identical ``Neg(lr)`` nodes of all updates into one, and its Snippets
tokenizer then fuses updates of different shapes through it into one "Subgraph" kernel
(MobileNetV2: the 1280x320x1x1 classifier-side weight with the 659,722-element flat update
of the small parameters), which took 38-180 s per step. The script prints, per form, the
Subgraph kernels whose inputs differ in element count, OpenVINO's step (cut off after
``--timeout`` seconds) and ONNX Runtime's on the same feeds.

    python bench/repro_openvino_update.py            # about a minute; needs the [openvino] extra
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import flowserve as flow  # noqa: E402
import flowserve.models as models  # noqa: E402
import flowserve.nn as nn  # noqa: E402
from flowserve.onnx_backend import openvino, providers, runtime  # noqa: E402
from flowserve.onnx_backend.lowering import training  # noqa: E402


class TrainGraph(nn.Graph):
    def __init__(self, model):
        super().__init__()
        self.model = model
        self.loss_fn = nn.CrossEntropyLoss()
        self.add_optimizer(flow.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9))
        self.config.allow_fuse_model_update_ops(True)
        self.config.set_execution_provider("cpu")

    def build(self, x, y):
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return loss


def mixed_subgraphs(session) -> list:
    """OpenVINO's fused "Subgraph" kernels whose tensor inputs do not broadcast together
    (updates of different shapes in one kernel)."""
    found = []
    for op in session.compiled.get_runtime_model().get_ordered_ops():
        if op.get_rt_info()["layerType"].astype(str) != "Subgraph":
            continue
        shapes = [tuple(i.get_partial_shape().to_shape()) for i in op.inputs()]
        try:
            np.broadcast_shapes(*shapes)
        except ValueError:
            found.append(f"{op.get_friendly_name()}: inputs {sorted(set(shapes))}")
    return found


def lowered(compiled, negated: bool):
    """The OpenVINO lowering of the compiled training step, the step negated or subtracted."""
    rewrite = training.subtract_negated_steps
    if negated:
        training.subtract_negated_steps = lambda b, keep: 0
    try:
        return compiled._lower(compiled.fed_state, compiled._baked, compiled.engine_options("openvino"),
                               dynamic_batch=False)
    finally:
        training.subtract_negated_steps = rewrite


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds an OpenVINO step may take")
    args = parser.parse_args()
    if not openvino.runtime_available():
        sys.exit(f"needs OpenVINO: {openvino.INSTALL_HINT}")
    rng = np.random.default_rng(0)
    x = flow.tensor(rng.standard_normal((64, 3, 32, 32)).astype(np.float32))
    y = flow.tensor(rng.integers(0, 10, 64))
    flow.manual_seed(0)
    graph = TrainGraph(models.mobilenet_v2(num_classes=10))
    graph(x, y)
    compiled = graph._compiled
    threads = os.cpu_count() or 1
    for form, negated in (("Add(p, Mul(d, Neg(lr)))", True), ("Sub(p, Mul(d, lr))", False)):
        model = lowered(compiled, negated)
        feeds = {v.name: a for v, a in zip(compiled.traced.ir.inputs, (x.numpy(), y.numpy()))}
        feeds.update({name: compiled.traced.state[name].numpy() for name in compiled.fed_state})
        start = time.perf_counter()
        session = openvino.runtime_session(model.SerializeToString(), threads)
        compile_s = time.perf_counter() - start
        start = time.perf_counter()
        outs = runtime.run_within(session, compiled.output_names, feeds, args.timeout)
        ov_s = time.perf_counter() - start
        ort_session = providers.create_session(model, provider="cpu", threads=threads)
        ort_session.run(compiled.output_names, feeds)
        start = time.perf_counter()
        (ort_loss,) = ort_session.run(compiled.output_names, feeds)
        ort_s = time.perf_counter() - start
        cut = f"> {args.timeout:.0f} s (cut off)"
        step = cut if outs is None else f"{ov_s * 1e3:.0f} ms, loss {float(outs[0]):.6f}"
        print(f"{form}: OpenVINO compile {compile_s:.1f} s, step {step}; ONNX Runtime step {ort_s * 1e3:.0f} ms, "
              f"loss {float(ort_loss):.6f}; load {os.getloadavg()[0]:.1f}", flush=True)
        for line in mixed_subgraphs(session):
            print(f"  mixed-shape Subgraph {line}")


if __name__ == "__main__":
    main()
