"""Other ONNX layouts of a convnet's training kernels, timed against the ones the graph
lowering emits, on ONNX Runtime's CPU provider, in the same interleaved rounds.

Weight gradient of a 3x3, stride-1, padding-1 convolution, ``dW = sum x_pad[taps] * dy``
over ResNet-18 CIFAR's layer shapes (batch 64):

- ``gather`` (the lowering's, ``flowserve/ir/passes/conv_weight_grad.py``): the padded input
  laid out ``(N, Hp*Wp, C)``, one ``Gather`` of the taps, ``(O, N*H*W) @ (N*H*W, 9*C)``;
- ``taps as rows``: the input laid out ``(C, Hp*Wp, N)``, ``(C*9, H*W*N) @ (H*W*N, O)``,
  the output gradient transposed to ``(H, W, N, O)``;
- ``conv``: the weight gradient as the convolution it is (input ``(C, N, H, W)``, kernel
  ``(O, N, H, W)``);
- ``shifted gradient``: no copy of the input's taps; the output gradient, zero padded to the
  input's padded grid, shifted once per tap along the flat positions and stacked,
  ``(9*O, N*Hp*Wp) @ (N*Hp*Wp, C)`` (more products: the padding's zeros).

The products alone, from operands already laid out: the lowering's ``(O, K) @ (K, 9*C)``,
the taps as rows ``(9*C, K) @ (K, O)``, and ``FusedMatMul`` with both of the lowering's
matrices transposed (``(9*C, O)`` with no copy; ``K = N*H*W``).

Input gradient of a 3x3, stride-2 convolution: ``ConvTranspose`` (the lowering's) against its
four output phases as one 2x2 ``Conv`` with ``4*C`` outputs and ``DepthToSpace`` (16/9 of the
products, every one in a stride-1 convolution).

    python bench/bench_weight_grad_layouts.py --rounds 9
    python bench/bench_weight_grad_layouts.py --parts products
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

BATCH = 64
# (channels, image side) of ResNet-18 CIFAR's 3x3 stride-1 layers, and (input gradient
# channels, output gradient channels, output gradient side) of its stride-2 ones
LAYERS = ((64, 32), (128, 16), (256, 8), (512, 4))
STRIDED = ((64, 128, 16), (128, 256, 8), (256, 512, 4))


def product_models() -> dict:
    """name -> (nodes, constants, operands as (lowering's rows, columns) -> this model's)."""
    fused = helper.make_node("FusedMatMul", ["a", "b"], ["out"], domain="com.microsoft", transA=1, transB=1)
    return {"gather": ([_node("MatMul", ["a", "b"], "out")], {}, lambda rows, cols: (rows, cols)),
            "taps as rows": ([_node("MatMul", ["a", "b"], "out")], {},
                             lambda rows, cols: (np.ascontiguousarray(cols.T), np.ascontiguousarray(rows.T))),
            "FusedMatMul TT": ([fused], {}, lambda rows, cols: (cols, rows))}


def _session(nodes: list, inputs: dict, constants: dict) -> ort.InferenceSession:
    graph = helper.make_graph(
        nodes, "bench", [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in constants.items()])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = 2, 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _ints(*values) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def _node(op: str, inputs: list, output: str, **attrs):
    return helper.make_node(op, inputs, [output], **attrs)


def _tap_positions(side: int, padded: int) -> np.ndarray:
    """Flat positions in the padded image of each output position's (rows) 9 taps (columns)."""
    y, x = (g.reshape(-1, 1) for g in np.meshgrid(np.arange(side), np.arange(side), indexing="ij"))
    i, j = (g.reshape(1, -1) for g in np.meshgrid(np.arange(3), np.arange(3), indexing="ij"))
    return ((y + i) * padded + x + j).astype(np.int64)


def weight_gradient_models(c: int, side: int) -> dict:
    """name -> (nodes, constants): ``out`` is ``dW`` as ``(C, O, 3, 3)`` from ``x``, ``dy``."""
    n, o, p = BATCH, c, side + 2
    index = _tap_positions(side, p)
    pads = _ints(0, 1, 1, 0, 0, 1, 1, 0)
    models = {"gather": ([
        _node("Transpose", ["x"], "xt", perm=[0, 2, 3, 1]), _node("Pad", ["xt", "pads"], "xp"),
        _node("Reshape", ["xp", "flat"], "xf"), _node("Gather", ["xf", "index"], "taps", axis=1),
        _node("Reshape", ["taps", "cols"], "cols_m"), _node("Transpose", ["dy"], "dyt", perm=[1, 0, 2, 3]),
        _node("Reshape", ["dyt", "rows"], "rows_m"), _node("MatMul", ["rows_m", "cols_m"], "prod"),
        _node("Reshape", ["prod", "split"], "by_tap"), _node("Transpose", ["by_tap"], "out", perm=[3, 0, 1, 2])],
        {"pads": pads, "flat": _ints(n, p * p, c), "index": index, "cols": _ints(n * side * side, 9 * c),
         "rows": _ints(o, n * side * side), "split": _ints(o, 3, 3, c)})}
    models["taps as rows"] = ([
        _node("Transpose", ["x"], "xt", perm=[1, 2, 3, 0]), _node("Pad", ["xt", "pads"], "xp"),
        _node("Reshape", ["xp", "flat"], "xf"), _node("Gather", ["xf", "index"], "taps", axis=1),
        _node("Reshape", ["taps", "rows"], "rows_m"), _node("Transpose", ["dy"], "dyt", perm=[2, 3, 0, 1]),
        _node("Reshape", ["dyt", "cols"], "cols_m"), _node("MatMul", ["rows_m", "cols_m"], "prod"),
        _node("Reshape", ["prod", "split"], "by_tap"), _node("Transpose", ["by_tap"], "out", perm=[0, 3, 1, 2])],
        {"pads": pads, "flat": _ints(c, p * p, n), "index": np.ascontiguousarray(index.T),
         "rows": _ints(9 * c, side * side * n), "cols": _ints(side * side * n, o), "split": _ints(c, 3, 3, o)})
    models["conv"] = ([
        _node("Transpose", ["x"], "xt", perm=[1, 0, 2, 3]), _node("Transpose", ["dy"], "dyt", perm=[1, 0, 2, 3]),
        _node("Conv", ["xt", "dyt"], "out", pads=[1, 1, 1, 1])], {})
    reach = 2 * p + 2  # the largest shift, a tap's flat offset in the padded grid
    nodes = [_node("Transpose", ["x"], "xt", perm=[0, 2, 3, 1]), _node("Pad", ["xt", "pads"], "xp"),
             _node("Reshape", ["xp", "flat_rows"], "xf"), _node("Pad", ["dy", "grid"], "dyp"),
             _node("Transpose", ["dyp"], "dyt", perm=[1, 0, 2, 3]), _node("Reshape", ["dyt", "rows"], "g"),
             _node("Pad", ["g", "lead"], "gb")]
    constants = {"pads": pads, "flat_rows": _ints(n * p * p, c), "grid": _ints(0, 0, 0, 0, 0, 0, 2, 2),
                 "rows": _ints(o, n * p * p), "lead": _ints(0, reach, 0, 0), "axis": _ints(1),
                 "split": _ints(3, 3, o, c)}
    for t in range(9):
        shift = (t // 3) * p + t % 3
        constants[f"start{t}"], constants[f"end{t}"] = _ints(reach - shift), _ints(reach - shift + n * p * p)
        nodes.append(_node("Slice", ["gb", f"start{t}", f"end{t}", "axis"], f"tap{t}"))
    nodes += [helper.make_node("Concat", [f"tap{t}" for t in range(9)], ["stacked"], axis=0),
              _node("MatMul", ["stacked", "xf"], "prod"), _node("Reshape", ["prod", "split"], "by_tap"),
              _node("Transpose", ["by_tap"], "out", perm=[3, 2, 0, 1])]
    models["shifted gradient"] = (nodes, constants)
    return models


def strided_input_gradient_models(c: int, o: int, side: int, w: np.ndarray) -> dict:
    """name -> (nodes, constants): ``out`` is ``dx`` ``(N, C, 2*side, 2*side)`` from ``dy``."""
    taps = np.zeros((2, 2, 3), np.float32)  # [output phase, 2x2 tap, 3x3 tap]
    taps[0, 0, 1] = taps[1, 0, 2] = taps[1, 1, 0] = 1
    phases = np.einsum("atk,bul,ickl->abcitu", taps, taps, w).reshape(4 * c, o, 2, 2)
    return {"ConvTranspose": ([_node("ConvTranspose", ["dy", "w"], "out", strides=[2, 2], pads=[1, 1, 1, 1],
                                     output_padding=[1, 1])], {"w": w}),
            "phases": ([_node("Conv", ["dy", "w4"], "c4", pads=[0, 0, 1, 1]),
                        _node("DepthToSpace", ["c4"], "out", blocksize=2, mode="DCR")], {"w4": phases})}


def _reference_weight_gradient(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """numpy's ``dW`` as ``(C, O, 3, 3)``: each tap's input window contracted with ``dy``."""
    side = x.shape[2]
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))

    def tap(a: int, b: int) -> np.ndarray:
        return np.einsum("nchw,nohw->co", xp[:, :, a:a + side, b:b + side], dy, optimize=True)

    return np.stack([np.stack([tap(a, b) for b in range(3)], -1) for a in range(3)], -2)


def _time(sessions: dict, feeds: dict, rounds: int, title: str) -> None:
    """Prints each session's wall and CPU time per run (``feeds``: one for all, or per name)."""
    wall, cpu = {k: [] for k in sessions}, {k: [] for k in sessions}
    for _ in range(rounds):
        for name, session in sessions.items():
            t, c = time.perf_counter(), time.process_time()
            session.run(None, feeds.get(name, feeds))
            wall[name].append((time.perf_counter() - t) * 1e3)
            cpu[name].append((time.process_time() - c) * 1e3)
    first = next(iter(sessions))
    print(f"{title}  (load {os.getloadavg()[0]:.1f})")
    for name in sessions:
        print(f"  {name:<17} wall min {min(wall[name]):7.1f} median {statistics.median(wall[name]):7.1f}  "
              f"cpu median {statistics.median(cpu[name]):7.1f}   {first} / this: wall min "
              f"{min(wall[first]) / min(wall[name]):5.2f}x, cpu median "
              f"{statistics.median(cpu[first]) / statistics.median(cpu[name]):5.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--parts", default="weight,products,strided",
                        help="comma-separated: weight (gradient layouts), products (their MatMuls alone), strided")
    args = parser.parse_args()
    parts = args.parts.split(",")
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, ms per call, interleaved rounds")
    rng = np.random.default_rng(0)
    for c, side in LAYERS if "products" in parts else ():
        k = BATCH * side * side
        rows, cols = rng.standard_normal((c, k), dtype=np.float32), rng.standard_normal((k, 9 * c), dtype=np.float32)
        sessions, feeds = {}, {}
        for name, (nodes, constants, operands) in product_models().items():
            a, b = operands(rows, cols)
            sessions[name], feeds[name] = _session(nodes, {"a": a, "b": b}, constants), {"a": a, "b": b}
        expected = rows @ cols
        for name, session in sessions.items():
            got = session.run(None, feeds[name])[0]
            np.testing.assert_allclose(got if name == "gather" else got.T, expected, rtol=1e-3,
                                       atol=1e-4 * np.abs(expected).max(), err_msg=name)
        _time(sessions, feeds, args.rounds, f"products alone, ({c}, {k}) @ ({k}, {9 * c})")
    for c, side in LAYERS if "weight" in parts else ():
        x, dy = (rng.standard_normal((BATCH, c, side, side), dtype=np.float32) for _ in range(2))
        expected = _reference_weight_gradient(x, dy)
        sessions = {name: _session(nodes, {"x": x, "dy": dy}, constants)
                    for name, (nodes, constants) in weight_gradient_models(c, side).items()}
        for name, session in sessions.items():
            got = session.run(None, {"x": x, "dy": dy})[0]
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-3 * np.abs(expected).max(), err_msg=name)
        _time(sessions, {"x": x, "dy": dy}, args.rounds, f"weight gradient, {c}x{c}x3x3 on {side}x{side}")
    for c, o, side in STRIDED if "strided" in parts else ():
        dy = rng.standard_normal((BATCH, o, side, side), dtype=np.float32)
        w = rng.standard_normal((o, c, 3, 3), dtype=np.float32)
        sessions = {name: _session(nodes, {"dy": dy}, constants)
                    for name, (nodes, constants) in strided_input_gradient_models(c, o, side, w).items()}
        outs = [s.run(None, {"dy": dy})[0] for s in sessions.values()]
        np.testing.assert_allclose(outs[1], outs[0], rtol=1e-4, atol=1e-4 * np.abs(outs[0]).max())
        _time(sessions, {"dy": dy}, args.rounds, f"input gradient, 3x3 stride 2, {o} -> {c} channels, {side}x{side} -> "
              f"{2 * side}x{2 * side}")


if __name__ == "__main__":
    main()
