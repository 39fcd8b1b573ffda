"""One process of a launched run: runs the user's script as ``__main__`` and reports a
failed rendezvous or collective as one line naming the rank (no traceback)."""

from __future__ import annotations

import os
import runpy
import sys

from flowserve import env
from flowserve.errors import DistributedError


def main() -> int:
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
    except DistributedError as exc:
        print(f"flowserve: rank {env.get_rank()}: {exc}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(1)  # the engine is broken now: its threads must not run exit handlers
    env.destroy()  # leave the group while the interpreter is whole (not from an exit handler)
    return 0


if __name__ == "__main__":
    sys.exit(main())
