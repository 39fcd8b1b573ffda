"""``flowserve perf URL --model m``: load-test a model over HTTP or gRPC."""

from __future__ import annotations

import asyncio
from typing import Optional

import typer

from .errors import ClientError
from .tls import TLS


def perf(
    url: str = typer.Argument(..., help="Server address: http://HOST:PORT (gRPC: HOST:PORT)."),
    model: str = typer.Option(..., "--model", "-m", help="Model to drive: NAME or NAME:VERSION."),
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
                   "the same load, alternating with MODEL; prints both side by side."),
    ca_file: Optional[str] = typer.Option(
        None, help="TLS: PEM CA certificates to trust (an https:// URL alone trusts the system's)."),
    cert_file: Optional[str] = typer.Option(None, help="TLS: this client's PEM certificate (mutual TLS)."),
    key_file: Optional[str] = typer.Option(None, help="TLS: its PEM key, when --cert-file lacks it."),
) -> None:
    """Measure throughput and p50/p90/p99 latency of MODEL at URL."""
    from .compare import run_compare, split_variant  # local: `flowserve --help` loads this module; the command's stack loads when it runs
    from .perf import run_load  # local: as above

    if protocol not in ("http", "grpc"):
        typer.echo(f"error: --protocol: expected http or grpc, got {protocol!r}", err=True)
        raise typer.Exit(2)
    try:
        name, version = split_variant(model)
    except ValueError as exc:
        typer.echo(f"error: --model: {exc}", err=True)
        raise typer.Exit(2) from None
    tls = TLS(ca_file, cert_file, key_file) if (ca_file or cert_file) else None
    if compare:
        job = run_compare(url, model, compare, concurrency, duration, protocol, not json_tensors, token,
                          max_requests=max_requests, tls=tls)
    else:
        job = run_load(url, name, concurrency, duration, protocol, binary=not json_tensors,
                       max_requests=max_requests, token=token, version=version, tls=tls)
    _report(job, plot)


def _report(job, plot: Optional[str]) -> None:
    """Run a load (or a comparison), print its summary, write its plot; exit 1 on errors."""
    try:
        result = asyncio.run(job)
    except (ClientError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(result.summary())
    if plot:
        result.plot(plot)
        typer.echo(f"latency plot written to {plot}")
    if result.errors:
        raise typer.Exit(1)
