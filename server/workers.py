"""``flowserve serve --workers N``: N server processes behind one HTTP (and gRPC) port.

The supervisor reserves the ports (SO_REUSEPORT, so port 0 resolves once for all),
starts N worker processes that each load the models from the same files and bind
the same ports, and the kernel spreads incoming connections over them. The first
``grpc_workers`` workers also serve gRPC. Metrics and Triton's statistics add up
across workers (see ``ServerMetrics.publish``), and a model load or unload that one
worker serves reaches every worker (``server/control.py``). Each worker sizes its ONNX
Runtime sessions for its share of the CPUs (``flowserve.utils.cpus``: 4 CPUs, 2 workers:
2 each), so the workers together never ask for more cores than there are. SIGINT/SIGTERM is passed on
to every worker, which finishes its in-flight requests. A worker that dies (killed, out
of memory) is replaced by a new one on the same ports, while the others go on serving;
more than ``worker_restarts_per_minute`` restarts within a minute means the workers cannot
stay up (a crash loop), and the supervisor stops them all and exits non-zero, for
systemd or Kubernetes to restart the whole server::

    with WorkerPool(ServerSettings(model_path="m.onnx", http_port=0, workers=2)).background() as pool:
        print(pool.http_url, pool.grpc_address)
"""

from __future__ import annotations

import collections
import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import tempfile
import threading
import time
from typing import Iterator, Optional

from flowserve.utils.cpus import CPUS_ENV, usable_cpus

from .app import InferenceServer, Listening, reserve_port
from .control import acknowledgement
from .logs import configure_logging
from .settings import ServerSettings
from .tls import server_context

log = logging.getLogger("flowserve.server")

RESTART_WINDOW_S = 60.0  # worker_restarts_per_minute counts restarts within this window


def _serve_worker(fields: dict, ready, cpus: int) -> None:
    """A worker process: one ``InferenceServer`` on the shared ports until SIGTERM, its
    sessions sized for its share of the CPUs."""
    os.environ[CPUS_ENV] = str(cpus)
    settings = ServerSettings(**fields)
    configure_logging(settings.log_level)
    server = InferenceServer(settings)
    threading.Thread(target=lambda: server.wait_started() and ready.set(), daemon=True).start()
    server.run()


class WorkerPool(Listening):
    """Supervises ``settings.workers`` processes serving the same ports."""

    def __init__(self, settings: ServerSettings):
        server_context(settings, "h2")  # a certificate that is not one fails here, not in N workers
        self.settings = settings
        self.grpc_workers = settings.grpc_workers or settings.workers
        self.http_port: Optional[int] = None
        self.grpc_port: Optional[int] = None
        self.processes: list = []
        self.metrics_dir: Optional[str] = None
        self.exit_status: Optional[int] = None  # set once the supervisor has stopped
        self._stop = threading.Event()
        self._readiness: dict = {}  # process -> its "ready" event

    def run(self) -> int:
        """Serve in the foreground until SIGINT/SIGTERM; the exit status (0: clean, 1: the
        workers kept dying)."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: self._stop.set())
        with self._running():
            log.info("serving", extra={"http": self.http_url, "grpc": self.grpc_address,
                                       "workers": len(self.processes)})
            return self._supervise()

    @contextlib.contextmanager
    def background(self, start_timeout_s: float = 120.0) -> Iterator["WorkerPool"]:
        """Every worker started and ready for the ``with`` block, dead ones restarted
        meanwhile (``exit_status`` is set if the supervisor gives up); all stopped after it."""
        with self._running(start_timeout_s):
            supervisor = threading.Thread(target=self._supervise, name="flowserve-supervisor",
                                          daemon=True)
            supervisor.start()
            try:
                yield self
            finally:
                self._stop.set()
                supervisor.join()

    def stop(self) -> None:
        """Stop supervising (no worker is restarted after this); ``run`` then stops the
        workers and returns, ``background`` at the end of its block."""
        self._stop.set()

    def _supervise(self) -> int:
        """Restart dead workers until a stop request, or until more than the allowed
        restarts fall within ``RESTART_WINDOW_S`` (then every worker is stopped); the
        exit status, also kept in ``exit_status``."""
        restarts: collections.deque = collections.deque()
        limit = self.settings.worker_restarts_per_minute
        while not self._stop.is_set():
            sentinels = [p.sentinel for p in self.processes]
            multiprocessing.connection.wait(sentinels, timeout=0.5)
            for index, process in enumerate(self.processes):
                if self._stop.is_set() or process.is_alive():
                    continue
                now = time.monotonic()
                while restarts and now - restarts[0] > RESTART_WINDOW_S:
                    restarts.popleft()
                if len(restarts) >= limit:
                    log.error("worker %s (pid %s) exited with code %s; %d restart(s) in the last "
                              "%g s reach --worker-restarts-per-minute (%d): stopping the server",
                              process.name, process.pid, process.exitcode, len(restarts),
                              RESTART_WINDOW_S, limit)
                    self.exit_status = 1
                    self._stop_workers()
                    return 1
                restarts.append(now)
                self._readiness.pop(process, None)
                acknowledgement(self.metrics_dir, process.pid).unlink(missing_ok=True)  # no load waits for it
                self.processes[index] = self._spawn(index)
                log.warning("worker exited; restarted it",
                            extra={"worker": process.name, "pid": process.pid,
                                   "exitcode": process.exitcode,
                                   "new_pid": self.processes[index].pid})
        self.exit_status = 0
        return 0

    @contextlib.contextmanager
    def _running(self, start_timeout_s: float = 600.0):
        host, reserved = self.settings.host, []
        self.metrics_dir = tempfile.mkdtemp(prefix="flowserve-metrics-")
        try:
            reserved.append(reserve_port(host, self.settings.http_port, reuse_port=True))
            self.http_port = reserved[-1].getsockname()[1]
            if self.settings.grpc_port is not None:
                reserved.append(reserve_port(host, self.settings.grpc_port, reuse_port=True))
                self.grpc_port = reserved[-1].getsockname()[1]
            self._start_workers(start_timeout_s)
            yield
        finally:
            self._stop_workers()
            for sock in reserved:
                sock.close()
            shutil.rmtree(self.metrics_dir, ignore_errors=True)

    def _start_workers(self, start_timeout_s: float) -> None:
        self.processes = [self._spawn(index) for index in range(self.settings.workers)]
        deadline = time.monotonic() + start_timeout_s
        for process in self.processes:
            while not self._readiness[process].wait(0.1):
                if not process.is_alive() or time.monotonic() > deadline:
                    raise RuntimeError(f"worker {process.name} did not start "
                                       f"(exit code {process.exitcode})")

    def _spawn(self, index: int):
        """Start worker ``index`` (a first start or a restart: same ports, same role)."""
        context = multiprocessing.get_context("spawn")  # no fork of a process with threads
        fields = self.settings.model_dump() | {
            "http_port": self.http_port, "reuse_port": True, "workers": 1,
            "grpc_workers": None, "shared_metrics_dir": self.metrics_dir,
            "grpc_port": self.grpc_port if index < self.grpc_workers else None}
        ready = context.Event()
        cpus = max(1, usable_cpus() // self.settings.workers)  # the workers' shares add up to the CPUs
        process = context.Process(target=_serve_worker, args=(fields, ready, cpus),
                                  name=f"flowserve-worker-{index}", daemon=False)
        process.start()
        self._readiness[process] = ready
        return process

    def is_ready(self, index: int) -> bool:
        """Whether worker ``index`` (as it is now, restarted or not) has started serving."""
        return self._readiness[self.processes[index]].is_set()

    def _stop_workers(self) -> None:
        """SIGTERM to every worker (each drains its in-flight requests), then wait."""
        for process in self.processes:
            if process.is_alive():
                process.terminate()
        deadline = self.settings.graceful_timeout_s + 30
        for process in self.processes:
            process.join(deadline)
            if process.is_alive():
                log.error("worker did not stop in time; killing it", extra={"pid": process.pid})
                process.kill()
                process.join()
