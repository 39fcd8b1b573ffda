"""``python -m flowserve.clients URL --model m``: the load generator (``flowserve perf``),
without loading flowserve's core, exporter or server."""

import typer

from flowserve.clients.cli import perf

if __name__ == "__main__":
    typer.run(perf)
