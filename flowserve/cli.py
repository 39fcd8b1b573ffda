"""The ``flowserve`` command line: ``demo``, ``export``, ``inspect``, ``serve``, ``perf``.

Each command lives beside the part of flowserve it drives; this file only gathers them,
importing each lazily so that ``flowserve --help`` stays fast.
"""

from __future__ import annotations

import typer

app = typer.Typer(
    name="flowserve",
    help="Train with nn.Graph, save, export fused ONNX, and serve it over HTTP and gRPC.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register() -> None:
    from flowserve.clients.cli import perf  # local: each subcommand's stack loads only when the CLI runs
    from flowserve.demo import demo  # local: as above
    from flowserve.exporter.cli import export, inspect  # local: exporter sits above the core
    from flowserve.server.cli import serve  # local: server sits above the core

    app.command("demo")(demo)
    app.command("export")(export)
    app.command("inspect")(inspect)
    app.command("serve")(serve)
    app.command("perf")(perf)


def main() -> None:
    _register()
    app()


if __name__ == "__main__":
    main()
