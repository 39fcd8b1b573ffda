"""Running launched processes from tests: loopback only, every run bounded in time."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

WORKERS = Path(__file__).parent / "workers"
REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(worker: str, *args, nproc: int = 2, timeout_s: float = 30.0, wall_s: float = 240.0,
           launcher_args=(), env=None) -> subprocess.CompletedProcess:
    """``python -m flowserve.distributed.launch`` on a worker script of ``workers/``; the
    collectives' timeout is ``timeout_s`` and the whole run must end within ``wall_s``."""
    command = [sys.executable, "-m", "flowserve.distributed.launch", "--nproc_per_node", str(nproc),
               "--master_addr", "127.0.0.1", "--master_port", str(free_port()), "--timeout", str(timeout_s),
               *launcher_args, str(WORKERS / worker), *map(str, args)]
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run(command, capture_output=True, text=True, timeout=wall_s, env=full_env, cwd=REPO)


def check(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
