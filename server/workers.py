"""``flowserve serve --workers N``: N server processes behind one HTTP (and gRPC) port.

The supervisor reserves the ports (SO_REUSEPORT, so port 0 resolves once for all),
starts N worker processes that each load the models from the same files and bind
the same ports, and the kernel spreads incoming connections over them. The first
``grpc_workers`` workers also serve gRPC. Metrics add up across workers (see
``ServerMetrics.publish``). SIGINT/SIGTERM is passed on to every worker, which
finishes its in-flight requests; a worker that dies stops the others and the
supervisor exits non-zero, for systemd or Kubernetes to restart::

    with WorkerPool(ServerSettings(model_path="m.onnx", http_port=0, workers=2)).background() as pool:
        print(pool.http_url, pool.grpc_address)
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import shutil
import signal
import tempfile
import threading
import time
from typing import Iterator, Optional

from .app import InferenceServer, Listening, reserve_port
from .logs import configure_logging
from .settings import ServerSettings
from .tls import server_context

log = logging.getLogger("flowserve.server")


def _serve_worker(fields: dict, ready) -> None:
    """A worker process: one ``InferenceServer`` on the shared ports until SIGTERM."""
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
        self._stop = threading.Event()

    def run(self) -> int:
        """Serve in the foreground until SIGINT/SIGTERM; the exit status (0: clean)."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: self._stop.set())
        with self._running():
            log.info("serving", extra={"http": self.http_url, "grpc": self.grpc_address,
                                       "workers": len(self.processes)})
            failed = self._watch()
        return 1 if failed else 0

    @contextlib.contextmanager
    def background(self, start_timeout_s: float = 120.0) -> Iterator["WorkerPool"]:
        """Every worker started and ready for the ``with`` block; all stopped after it."""
        with self._running(start_timeout_s):
            yield self

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> bool:
        """Wait for a stop request or a worker's death; whether a worker died."""
        while not self._stop.wait(0.5):
            dead = [p for p in self.processes if not p.is_alive()]
            if dead:
                log.error("a worker exited; stopping the others",
                          extra={"pid": dead[0].pid, "exitcode": dead[0].exitcode})
                return True
        return False

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
        context = multiprocessing.get_context("spawn")  # no fork of a process with threads
        readiness = []
        for index in range(self.settings.workers):
            fields = self.settings.model_dump() | {
                "http_port": self.http_port, "reuse_port": True, "workers": 1,
                "grpc_workers": None, "shared_metrics_dir": self.metrics_dir,
                "grpc_port": self.grpc_port if index < self.grpc_workers else None}
            ready = context.Event()
            process = context.Process(target=_serve_worker, args=(fields, ready),
                                      name=f"flowserve-worker-{index}", daemon=False)
            process.start()
            self.processes.append(process)
            readiness.append((process, ready))
        deadline = time.monotonic() + start_timeout_s
        for process, ready in readiness:
            while not ready.wait(0.1):
                if not process.is_alive() or time.monotonic() > deadline:
                    raise RuntimeError(f"worker {process.name} did not start "
                                       f"(exit code {process.exitcode})")

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
