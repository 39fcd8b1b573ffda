"""The export report: what was fused and folded, node counts, the checks that ran."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ExportReport:
    source: str
    target: str
    opset: int
    ir_version: int
    fused: list = field(default_factory=list)  # FusedGroup
    folded: int = 0
    passes: list = field(default_factory=list)  # the export passes that changed the graph, in order
    nodes_before: int = 0  # ONNX nodes of the same graph lowered without fusion
    nodes_after: int = 0
    ops_after: dict = field(default_factory=dict)
    parity: list = field(default_factory=list)  # ParityRecord
    external_data: str | None = None
    seconds: float = 0.0

    def fused_counts(self) -> dict:
        counts: dict = {}
        for group in self.fused:
            counts[group.kind] = counts.get(group.kind, 0) + 1
        return dict(sorted(counts.items()))

    def to_json(self) -> dict:
        return {
            "source": self.source, "target": self.target, "opset": self.opset, "ir_version": self.ir_version,
            "fused": [g.to_json() for g in self.fused], "fused_counts": self.fused_counts(),
            "folded": self.folded, "passes": self.passes, "nodes_before": self.nodes_before, "nodes_after": self.nodes_after,
            "ops_after": self.ops_after, "parity": [p.to_json() for p in self.parity],
            "external_data": self.external_data, "seconds": round(self.seconds, 4),
        }

    def summary(self) -> str:
        """A readable report: one line per fused kind, node counts, parity."""
        lines = [f"exported {self.source} (target {self.target}, opset {self.opset}, IR {self.ir_version}) "
                 f"in {self.seconds:.2f}s",
                 f"  ONNX nodes: {self.nodes_before} unfused -> {self.nodes_after} fused; "
                 f"{self.folded} constant node(s) folded"]
        for kind, n in self.fused_counts().items():
            lines.append(f"  fused {kind:<12} x{n}")
        if self.parity:
            worst = max(self.parity, key=lambda p: p.max_abs_err / p.allowed if p.allowed else 0.0)
            batches = sorted({p.batch for p in self.parity if p.batch is not None})
            lines.append(f"  parity vs flowserve at batch {batches}: ok (largest error {worst.max_abs_err:.2g} "
                         f"on {worst.output!r}, allowed {worst.allowed:.2g})")
            drawn = sorted({p.output for p in self.parity if p.compared == "shape"})
            if drawn:
                lines.append(f"  drawn at random, so checked for shape and finiteness only: {', '.join(drawn)}")
        if self.external_data:
            lines.append(f"  weights in external data file {self.external_data}")
        return "\n".join(lines)
