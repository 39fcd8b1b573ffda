"""``python -m flowserve.distributed.launch``: start the processes of one node.

    python -m flowserve.distributed.launch --nproc_per_node 2 train.py --epochs 3

Each process runs ``train.py`` with ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``MASTER_ADDR`` and ``MASTER_PORT`` set (OneFlow's and PyTorch's launcher spell them the
same). On several nodes, run the launcher once per node with ``--nnodes``,
``--node_rank`` and the same ``--master_addr``/``--master_port``. When a process fails,
the launcher names its rank, stops the others and exits with its code.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from flowserve.utils.cpus import usable_cpus

PREFIX = "flowserve.distributed.launch"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m {PREFIX}", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nproc_per_node", "--nproc-per-node", type=int, default=1, help="processes on this node")
    parser.add_argument("--nnodes", type=int, default=1, help="nodes taking part")
    parser.add_argument("--node_rank", "--node-rank", type=int, default=0, help="this node's index, 0..nnodes-1")
    parser.add_argument("--master_addr", "--master-addr", default="127.0.0.1", help="address of the node of rank 0")
    parser.add_argument("--master_port", "--master-port", type=int, default=29500, help="free port on the master node")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds the rendezvous and each collective may take (FLOWSERVE_DIST_TIMEOUT)")
    parser.add_argument("script", help="the training script")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="its arguments")
    args = parser.parse_args(argv)
    for name, low in (("nproc_per_node", 1), ("nnodes", 1), ("node_rank", 0)):
        if getattr(args, name) < low:
            parser.error(f"--{name} must be >= {low}, got {getattr(args, name)}")
    if args.node_rank >= args.nnodes:
        parser.error(f"--node_rank must be < --nnodes ({args.nnodes}), got {args.node_rank}")
    if not 0 < args.master_port < 65536:
        parser.error(f"--master_port must be in 1..65535, got {args.master_port}")
    return args


@dataclass
class Worker:
    rank: int
    local_rank: int
    process: subprocess.Popen


def _child_env(args, local_rank: int) -> dict:
    world = args.nnodes * args.nproc_per_node
    env = dict(os.environ)
    env.update(RANK=str(args.node_rank * args.nproc_per_node + local_rank), LOCAL_RANK=str(local_rank),
               WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(args.nproc_per_node), NNODES=str(args.nnodes),
               MASTER_ADDR=args.master_addr, MASTER_PORT=str(args.master_port))
    if args.timeout is not None:
        env["FLOWSERVE_DIST_TIMEOUT"] = str(args.timeout)
    if "OMP_NUM_THREADS" not in os.environ and args.nproc_per_node > 1:
        # the node's cores are shared by its processes (as torchrun does); numpy's BLAS reads this
        env["OMP_NUM_THREADS"] = str(max(1, usable_cpus() // args.nproc_per_node))
    return env


def start(args) -> list[Worker]:
    command = [sys.executable, "-u", "-m", "flowserve.distributed.worker", args.script, *args.script_args]
    workers = []
    for local_rank in range(args.nproc_per_node):
        env = _child_env(args, local_rank)
        workers.append(Worker(int(env["RANK"]), local_rank, subprocess.Popen(command, env=env)))
    return workers


def _describe(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _stop(workers: list[Worker], grace_s: float = 5.0) -> None:
    for w in workers:
        if w.process.poll() is None:
            w.process.terminate()
    deadline = time.monotonic() + grace_s
    for w in workers:
        try:
            w.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            w.process.kill()
            w.process.wait()


def supervise(workers: list[Worker], poll_s: float = 0.05) -> int:
    """Wait for every worker; the first failure stops the rest. Returns the exit code."""
    running = list(workers)
    while running:
        exited = [(w, w.process.poll()) for w in running]
        exited = [(w, code) for w, code in exited if code is not None]
        for w, _ in exited:
            running.remove(w)
        failed = [(w, code) for w, code in exited if code != 0]
        if failed:  # a rank killed by a signal is the cause; the ranks that saw it go follow
            failed.sort(key=lambda item: (item[1] >= 0, item[0].rank))
            others = [x.rank for x in running]
            causes = "; ".join(f"rank {w.rank} (local rank {w.local_rank}, pid {w.process.pid}) {_describe(code)}"
                               for w, code in failed)
            print(f"{PREFIX}: {causes}" + (f"; stopping ranks {others}" if others else ""),
                  file=sys.stderr, flush=True)
            _stop(running)
            code = failed[0][1]
            return code if code > 0 else 128 - code
        time.sleep(poll_s)
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    if not os.path.isfile(args.script):
        print(f"{PREFIX}: script {args.script!r} not found", file=sys.stderr)
        return 2
    workers = start(args)

    def forward(signum, _frame):
        _stop(workers)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, forward)
    try:
        return supervise(workers)
    except KeyboardInterrupt:
        _stop(workers)
        return 130


if __name__ == "__main__":
    sys.exit(main())
