"""``python -m flowserve.server PATH [options]``: the same as ``flowserve serve``."""

import typer

from flowserve.server.cli import serve

if __name__ == "__main__":
    typer.run(serve)
