"""``flowserve export DIR -o model.onnx`` and ``flowserve inspect DIR``.

Errors are one line on stderr naming the file and the problem, exit code 2, no traceback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import numpy as np
import typer

from flowserve.errors import FlowserveError

EXIT_ERROR = 2


def _fail(exc: Exception) -> None:
    message = " ".join(str(exc).split())
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(EXIT_ERROR)


def export(
    dir: Path = typer.Argument(..., help="A saved graph directory (written by flow.save)."),  # noqa: A002
    output: Optional[Path] = typer.Option(None, "-o", "--output",
                                          help="Where to write the ONNX model (default: DIR.onnx, "
                                               "DIR.<precision>.onnx for reduced precision)."),
    target: str = typer.Option("portable", help="portable (flowserve-domain local functions, any runtime), "
                                                "onnxruntime (com.microsoft fused kernels), or all (float32 "
                                                "only: one model per target, MODEL.<target>.onnx after the first, "
                                                "each proven)."),
    opset: Optional[int] = typer.Option(None, help="ONNX opset (default: the newest ONNX Runtime loads, >= 21)."),
    no_check: bool = typer.Option(False, "--no-check",
                                  help="Skip onnx.checker, shape inference and the parity check."),
    rtol: Optional[float] = typer.Option(None, help="Parity tolerance: relative, and times max|output| "
                                                    "absolute (default 1e-5 for float32)."),
    precision: str = typer.Option("fp32", help="fp32, int8 (static: calibrated on the saved examples, or a QAT "
                                               "graph's learned scales), int8-dynamic, fp16, or bf16 (CUDA GPU only)."),
    min_agreement: float = typer.Option(0.99, help="Least top-1 agreement with float32 on the saved examples "
                                                   "a reduced-precision model needs to be written."),
    force: bool = typer.Option(False, "--force", help="Write the model even when it misses --min-agreement "
                                                      "or cannot be checked."),
) -> None:
    """Export a saved graph to ONNX with fused subgraphs, proven on the saved examples."""
    from flowserve.exporter.export import TARGETS, export as export_model  # local: `flowserve --help` loads this module; the command's stack loads when it runs
    from flowserve.exporter.verified import export_verified  # local: as above

    suffix = ".onnx" if precision == "fp32" else f".{precision}.onnx"
    first = output or dir.with_name(dir.name + suffix)
    try:
        if target != "all":
            written = [(target, first)]
        elif precision != "fp32":
            raise FlowserveError(f"--target all exports float32 at every target ({', '.join(TARGETS)}); "
                                 f"--precision {precision} is made from one float32 export: drop --target all")
        else:  # the first target at the given path, the others beside it: model.onnx, model.onnxruntime.onnx
            written = [(t, first if i == 0 else first.with_name(f"{first.stem}.{t}{first.suffix or '.onnx'}"))
                       for i, t in enumerate(TARGETS)]
        for name, path in written:
            if no_check:
                if precision != "fp32":
                    raise FlowserveError("--no-check exports float32 only: reduced precision is always checked")
                typer.echo(export_model(dir, path, target=name, opset=opset, check=False).report.summary())
            else:
                result = export_verified(dir, path, precision=precision, target=name, opset=opset, rtol=rtol,
                                         min_agreement=min_agreement, force=force)
                typer.echo(result.summary())
            typer.echo(f"wrote {path}")
    except FlowserveError as exc:
        _fail(exc)


def inspect(
    dir: Path = typer.Argument(..., help="A saved graph directory (written by flow.save)."),  # noqa: A002
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (for machines)."),
) -> None:
    """Print a saved graph's signature, parameters, op counts and the groups the exporter fuses."""
    try:
        info = describe(dir)
    except FlowserveError as exc:
        _fail(exc)
    if as_json:
        typer.echo(json.dumps(info, indent=1))
        return
    typer.echo(format_table(info))


def describe(directory) -> dict:
    """What ``inspect`` shows, as JSON-able data."""
    from flowserve.exporter.passes import ExportGraph, run_passes  # local: `flowserve --help` loads this module; the command's stack loads when it runs
    from flowserve.serialization import read_graph_dir  # local: as above

    manifest, ir, params = read_graph_dir(directory)
    kinds = ir.state_kinds
    weights = [params[k] for k in ir.state if kinds[k] in ("parameter", "buffer")]
    graph = run_passes(ExportGraph.of(ir, params))
    return {
        "directory": str(directory), "graph": manifest.graph_name, "class": manifest.graph_class,
        "format_version": manifest.format_version, "flowserve_version": manifest.flowserve_version,
        "saved_training": manifest.training,
        "inputs": [s.model_dump() for s in manifest.inputs], "outputs": [s.model_dump() for s in manifest.outputs],
        "parameters": int(sum(int(np.prod(a.shape)) for a in weights)),
        "parameter_bytes": int(sum(a.nbytes for a in weights)),
        "ops": ir.op_counts(), "nodes": len(ir.nodes),
        "fused": [g.to_json() for g in graph.groups], "nodes_after_fusion": len(graph.ir.nodes),
        "examples": _examples_info(directory, manifest),
    }


def _examples_info(directory, manifest) -> dict | None:
    """The stored reference examples: batches, rows, tolerance, provenance, files."""
    from flowserve.serialization import read_examples  # local: `flowserve --help` loads this module; the command's stack loads when it runs

    examples = read_examples(directory)
    if examples is None:
        return None
    return {"batches": [b.rows for b in examples.batches], "rows": examples.rows, "rtol": examples.rtol,
            "inputs": examples.input_names, "outputs": examples.output_names,
            "provenance": examples.provenance, "files": manifest.examples}


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def format_table(info: dict) -> str:
    lines = [f"{info['graph']} ({info['class']}), saved by flowserve {info['flowserve_version']}, "
             f"format {info['format_version']}", "", "signature:"]
    for kind in ("inputs", "outputs"):
        for s in info[kind]:
            shape = "(" + ", ".join("batch" if d == -1 and i == 0 else str(d) for i, d in enumerate(s["shape"])) + ")"
            lines.append(f"  {kind[:-1]:<7} {s['name']:<24} {s['dtype']:<8} {shape}")
    lines += ["", f"parameters: {info['parameters']:,} ({_size(info['parameter_bytes'])})", "",
              f"ops ({info['nodes']} nodes):"]
    lines += [f"  {op:<24} {n:>5}" for op, n in sorted(info["ops"].items(), key=lambda kv: (-kv[1], kv[0]))]
    lines += ["", f"fused groups ({len(info['fused'])}; {info['nodes']} -> {info['nodes_after_fusion']} nodes):"]
    if not info["fused"]:
        lines.append("  (none)")
    lines += [f"  {g['kind']:<12} {g['scope'] or '-':<28} {' + '.join(g['ops']):<36} {g['detail']}"
              for g in info["fused"]]
    return "\n".join(lines + _examples_lines(info.get("examples")))


def _examples_lines(examples: dict | None) -> list:
    if examples is None:
        return ["", "examples: none (flow.save(graph, dir, examples=...) stores reference inputs and outputs)"]
    made = examples["provenance"]
    lines = ["", f"examples: {len(examples['batches'])} batch(es), {examples['rows']} row(s), rows per batch "
                 f"{examples['batches']}, outputs within rtol {examples['rtol']:g}",
             f"  made from {made.get('source', '?')} on {made.get('created', '?')} "
             f"(graph {made.get('graph', '?')}, flowserve {made.get('flowserve_version', '?')})"]
    lines += [f"  {name:<32} sha256 {digest[:16]}" for name, digest in sorted(examples["files"].items())]
    return lines
