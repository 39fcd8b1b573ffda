"""``flowserve perf URL --model m``: load-test a model over HTTP or gRPC."""

from __future__ import annotations

import asyncio
from typing import Optional

import typer


def perf(
    url: str = typer.Argument(..., help="Server address: http://HOST:PORT (gRPC: HOST:PORT)."),
    model: str = typer.Option(..., "--model", "-m", help="Model to drive."),
    concurrency: int = typer.Option(1, min=1, help="Concurrent workers (each one request at a time)."),
    duration: float = typer.Option(10.0, min=0.1, help="Seconds to measure (after a 0.5 s warmup)."),
    protocol: str = typer.Option("http", help="http or grpc."),
    json_tensors: bool = typer.Option(
        False, "--json", help="HTTP: send JSON tensors instead of the binary extension."
    ),
    max_requests: Optional[int] = typer.Option(None, min=1, help="Stop after this many requests."),
    token: Optional[str] = typer.Option(None, envvar="FLOWSERVE_AUTH_TOKEN",
                                        help="Bearer token, if the server wants one."),
    plot: Optional[str] = typer.Option(None, help="Write a latency plot (PNG) to this path."),
    compare: Optional[str] = typer.Option(
        None, help="A second model (NAME or NAME:VERSION, e.g. resnet:2 for its int8 export) driven with "
                   "the same load; MODEL may be NAME:VERSION too. Prints both side by side."),
) -> None:
    """Measure throughput and p50/p90/p99 latency of MODEL at URL."""
    from .errors import ClientError
    from .perf import run_load

    if protocol not in ("http", "grpc"):
        typer.echo(f"error: --protocol: expected http or grpc, got {protocol!r}", err=True)
        raise typer.Exit(2)
    if compare:
        _compare(url, model, compare, concurrency, duration, protocol, not json_tensors, token, plot,
                 max_requests)
        return
    try:
        report = asyncio.run(run_load(url, model, concurrency, duration, protocol,
                                      binary=not json_tensors, max_requests=max_requests,
                                      token=token))
    except (ClientError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(report.summary())
    if plot:
        report.plot(plot)
        typer.echo(f"latency plot written to {plot}")
    if report.errors:
        raise typer.Exit(1)


def _compare(url, model, other, concurrency, duration, protocol, binary, token, plot, max_requests) -> None:
    from .compare import run_compare
    from .errors import ClientError

    try:
        comparison = asyncio.run(run_compare(url, model, other, concurrency, duration, protocol, binary, token,
                                             max_requests=max_requests))
    except (ClientError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(comparison.table())
    if plot:
        comparison.plot(plot)
        typer.echo(f"latency plot written to {plot}")
    if comparison.first.report.errors or comparison.second.report.errors:
        raise typer.Exit(1)
