"""One process of a launched run: runs the user's script as ``__main__``.

A failed rendezvous or collective is reported as one line naming the rank (no traceback);
any failure ends the process at once with a non-zero code, so that the launcher stops the
other ranks instead of letting them wait. As ``multiprocessing``'s children do, the
process leaves with ``os._exit`` after the exit handlers ran: the engine's and the
runtime's native threads are not torn down by interpreter finalization, which can abort.
"""

from __future__ import annotations

import atexit
import os
import runpy
import sys
import traceback

from flowserve import env
from flowserve.errors import DistributedError


def _leave(code: int, run_exit_handlers: bool) -> None:
    if run_exit_handlers:
        atexit._run_exitfuncs()  # what interpreter exit would run (multiprocessing does the same)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main() -> None:
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
    except DistributedError as exc:
        print(f"flowserve: rank {env.get_rank()}: {exc}", file=sys.stderr)
        _leave(1, run_exit_handlers=False)  # the engine is broken: nothing more may wait on it
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if code:
            if not isinstance(exc.code, int):
                print(exc.code, file=sys.stderr)
            _leave(code, run_exit_handlers=False)
    except BaseException:  # noqa: BLE001 - any failure of the script ends this rank now
        traceback.print_exc()
        _leave(1, run_exit_handlers=False)
    env.destroy()  # leave the group while the interpreter is whole
    _leave(0, run_exit_handlers=True)


if __name__ == "__main__":
    main()
