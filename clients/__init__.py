"""flowserve.clients: HTTP and gRPC clients of the Open Inference Protocol.

They work with any KServe v2 / Triton-compatible server and know nothing else
of flowserve. numpy arrays in, numpy arrays out::

    import numpy as np
    from flowserve.clients import HTTPClient
    client = HTTPClient("http://127.0.0.1:8000")
    client.infer("mlp", {"x": np.ones((1, 64), np.float32)})["y"]
"""

from .errors import ClientError, InferenceServerError, ProtocolError, ServerUnreachableError
from .grpc_client import AsyncGRPCClient, GRPCClient
from .http import AsyncHTTPClient, HTTPClient
from .tls import TLS

__all__ = ["AsyncGRPCClient", "AsyncHTTPClient", "ClientError", "GRPCClient", "HTTPClient",
           "InferenceServerError", "ProtocolError", "ServerUnreachableError", "TLS"]
