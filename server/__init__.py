"""flowserve.server: serve saved graphs and ONNX models over HTTP and gRPC.

The Open Inference Protocol (KServe v2) over HTTP (JSON and the binary tensor
extension) and gRPC (``inference.GRPCInferenceService``), dynamic batching,
Prometheus metrics. From Python::

    from flowserve.server import InferenceServer, ServerSettings
    settings = ServerSettings(model_path="model.onnx", http_port=0, grpc_port=0)
    with InferenceServer(settings).background() as server:
        print(server.http_url)

From the shell: ``flowserve serve model.onnx`` (``--workers 4``: four processes
behind the same ports, ``WorkerPool`` from Python).
"""

from .app import InferenceServer
from .dataplane import DataPlane, InferenceRequest, InferenceResponse
from .settings import ServerSettings
from .workers import WorkerPool

__all__ = ["DataPlane", "InferenceRequest", "InferenceResponse", "InferenceServer",
           "ServerSettings", "WorkerPool"]
