"""``flowserve perf URL -m resnet:1 --compare resnet:2``: the same load on two variants.

Both variants (two models, or two versions ``name:version`` of one, fp32 and int8 say)
get the same inputs, concurrency and protocol; the load alternates between them in
``rounds`` slices so that a change in the machine's load hits both alike. The table puts
throughput, latency percentiles and the accuracy figures the server verified side by
side, with the ratio of the second to the first. The figures are model metadata
``parameters.verification`` over HTTP; over gRPC, whose metadata has no parameters, the
same values come from the model configuration's ``parameters``::

    comparison = asyncio.run(run_compare("http://127.0.0.1:8000", "resnet:1", "resnet:2",
                                         concurrency=32, duration_s=10))
    print(comparison.table())
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np

from .perf import LoadReport, client_for, run_load, sample_inputs


def split_variant(text: str) -> tuple[str, str]:
    """``"resnet:2"`` -> ``("resnet", "2")``; ``"resnet"`` -> ``("resnet", "")``."""
    name, _, version = text.partition(":")
    if not name or (version and not version.isdigit()):
        raise ValueError(f"model variant: expected NAME or NAME:VERSION (a number), got {text!r}")
    return name, version


@dataclasses.dataclass
class Variant:
    """One side of a comparison: what was driven, what it measured, what the server verified."""

    label: str
    report: LoadReport
    parameters: dict


@dataclasses.dataclass
class Comparison:
    first: Variant
    second: Variant

    def rows(self) -> list:
        """(metric, first, second, ratio second/first or "") rows of the table, as text."""
        a, b = self.first, self.second
        rows = [("throughput (req/s)", a.report.throughput, b.report.throughput)]
        rows += [(f"latency p{q} (ms)", a.report.percentile_ms(q), b.report.percentile_ms(q)) for q in (50, 90, 99)]
        out = [(name, f"{x:,.3f}", f"{y:,.3f}", _ratio(x, y)) for name, x, y in rows]
        out += [("requests", str(a.report.requests), str(b.report.requests), ""),
                ("errors", str(a.report.errors), str(b.report.errors), ""),
                ("verified", _yes(a.parameters), _yes(b.parameters), "")]
        va, vb = _verification(a.parameters), _verification(b.parameters)
        out.append(("precision", str(va.get("precision", "-")), str(vb.get("precision", "-")), ""))
        out.append(("top-1 agreement (examples)", _percent(va.get("top1_agreement")),
                    _percent(vb.get("top1_agreement")), ""))
        out.append(("max abs err (examples)", _worst(va.get("max_abs_err")), _worst(vb.get("max_abs_err")), ""))
        return out

    @property
    def errors(self) -> int:
        return self.first.report.errors + self.second.report.errors

    def summary(self) -> str:
        return self.table()

    def table(self) -> str:
        a, b = self.first, self.second
        width = max(22, len(a.label) + 2, len(b.label) + 2)
        lines = [f"{'':<32}{a.label:>{width}}{b.label:>{width}}{'ratio':>10}"]
        for name, x, y, ratio in self.rows():
            lines.append(f"{name:<32}{x:>{width}}{y:>{width}}{ratio:>10}")
        lines.append(f"{a.report.protocol}, concurrency {a.report.concurrency}; ratio = "
                     f"{b.label} / {a.label} (for latency, below 1 is faster)")
        return "\n".join(lines)

    def plot(self, path: str) -> None:
        """Write a PNG: both latency distributions on one histogram (needs matplotlib)."""
        import matplotlib  # local: optional, needed only for --plot

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # local: after choosing the Agg backend

        figure, axis = plt.subplots(figsize=(8, 4))
        for variant in (self.first, self.second):
            latencies_ms = np.asarray(variant.report.latencies_s) * 1e3
            axis.hist(latencies_ms, bins=100, alpha=0.5,
                      label=f"{variant.label}: {variant.report.throughput:,.0f} req/s")
        axis.set(xlabel="latency (ms)", ylabel="requests", title="latency, side by side")
        axis.legend()
        figure.tight_layout()
        figure.savefig(path, dpi=100)
        plt.close(figure)


def config_parameters(config: dict) -> dict:
    """The ``parameters`` of a model configuration (Triton's shape: each value a JSON text in
    a ``string_value``) as plain values: ``{"verified": True, "verification": {...}}``. A
    value that is not JSON stays the text it is."""
    found = {}
    for name, value in (config.get("parameters") or {}).items():
        text = value.get("string_value", "") if isinstance(value, dict) else value
        try:
            found[name] = json.loads(text)
        except (TypeError, ValueError):
            found[name] = text
    return found


def _verification(parameters: dict) -> dict:
    value = parameters.get("verification")
    return value if isinstance(value, dict) else {}


def _yes(parameters: dict) -> str:
    if parameters.get("verified") is True:
        return "yes"
    return f"no ({parameters.get('verification', 'not reported')})" if parameters else "not reported"


def _percent(value) -> str:
    return f"{value:.2%}" if isinstance(value, (int, float)) else "-"


def _worst(value) -> str:
    """The largest of the per-output errors the server reported."""
    return f"{max(value.values()):.3g}" if isinstance(value, dict) and value else "-"


def _ratio(x, y) -> str:
    if isinstance(x, (int, float)) and isinstance(y, (int, float)) and x and np.isfinite(x) and np.isfinite(y):
        return f"{y / x:.2f}x"
    return ""


async def run_compare(url: str, first: str, second: str, concurrency: int = 1, duration_s: float = 10.0,
                      protocol: str = "http", binary: bool = True, token=None, rounds: int = 2,
                      max_requests=None, tls=None) -> Comparison:
    """Drive ``first`` and ``second`` (``NAME`` or ``NAME:VERSION``) with the same inputs,
    alternating ``rounds`` times, ``duration_s`` in all for each. The verification figures
    come from model metadata ``parameters`` (HTTP) or the model configuration (gRPC)."""
    variants = [split_variant(first), split_variant(second)]
    client = client_for(url, protocol, binary, token, tls)
    try:
        metadata = [await client.model_metadata(name, version) for name, version in variants]
        parameters = [m.get("parameters") or config_parameters(
                          await client.model_config(name, version))
                      for m, (name, version) in zip(metadata, variants)]
    finally:
        await client.close()
    inputs = sample_inputs(metadata[0])
    reports: list = [[], []]
    for _ in range(rounds):
        for i, (name, version) in enumerate(variants):
            reports[i].append(await run_load(url, name, concurrency, duration_s / rounds, protocol, binary,
                                             inputs=inputs, token=token, version=version,
                                             max_requests=max_requests, tls=tls))
    merged = [_merge(r) for r in reports]
    return Comparison(*(Variant(label, report, params)
                        for label, report, params in zip((first, second), merged, parameters)))


def _merge(reports: list) -> LoadReport:
    first = reports[0]
    latencies = [x for r in reports for x in r.latencies_s]
    errors = sum(r.errors for r in reports)
    first_error = next((r.first_error for r in reports if r.first_error), "")
    return LoadReport(first.protocol, first.concurrency, sum(r.elapsed_s for r in reports), latencies, errors,
                      first_error)
