"""HTTP clients of the Open Inference Protocol: ``HTTPClient`` and ``AsyncHTTPClient``.

numpy in, numpy out; the binary tensor extension by default (``binary=False``
sends JSON tensors); an ``https://`` URL, or ``tls=TLS(...)``, speaks TLS; server
errors raise ``InferenceServerError`` with the server's message and HTTP status::

    from flowserve.clients import HTTPClient
    with HTTPClient("http://127.0.0.1:8000") as client:
        outputs = client.infer("mlp", {"x": np.ones((1, 64), np.float32)})
        outputs["y"].shape

    async with AsyncHTTPClient("http://127.0.0.1:8000") as client:
        outputs = await client.infer("mlp", {"x": x})
"""

from __future__ import annotations

import json
import ssl
import threading
from typing import Optional
from urllib.parse import urlsplit

from . import rest
from ._http11 import BlockingConnection, ConnectionPool
from .errors import ProtocolError, ServerUnreachableError
from .tls import TLS


def _endpoint(url: str, tls: Optional[TLS]) -> tuple[str, int, Optional[ssl.SSLContext]]:
    """``(host, port, TLS context)`` of ``url``: https (or ``tls`` given) speaks TLS."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"url: expected http://HOST:PORT or https://HOST:PORT, got {url!r}")
    secure = parts.scheme == "https" or tls is not None
    context = (tls or TLS()).context("http/1.1") if secure else None
    return parts.hostname, parts.port or (443 if secure else 80), context


def _auth(token: Optional[str]) -> dict:
    return {"Authorization": f"Bearer {token}"} if token else {}


class HTTPClient:
    """Blocking client; one keep-alive connection per thread (thread-safe)."""

    def __init__(self, url: str, token: Optional[str] = None, timeout_s: float = 60.0,
                 binary: bool = True, tls: Optional[TLS] = None):
        self.host, self.port, self._tls = _endpoint(url, tls)
        self.timeout_s, self.binary = timeout_s, binary
        self._auth = _auth(token)
        self._local = threading.local()

    def _connection(self) -> BlockingConnection:
        connection = getattr(self._local, "connection", None)
        if connection is None or connection.closed:
            connection = BlockingConnection(self.host, self.port, self.timeout_s, self._tls)
            self._local.connection = connection
        return connection

    def request(self, method: str, path: str, body=b"",
                headers: Optional[dict] = None) -> tuple[int, dict, bytes]:
        """One raw request (``body``: bytes or a list of bytes-like parts):
        ``(status, lower-cased headers, body)``."""
        headers = {**self._auth, **headers} if headers else self._auth
        for attempt in (0, 1):
            try:
                return self._connection().request(method, path, body, headers)
            except ProtocolError:
                self._drop_connection()
                raise
            except OSError as exc:  # ConnectionError, timeouts, refused connections, TLS
                self._drop_connection()
                # a stale kept-alive connection is worth one retry; a refusal or a certificate
                # the client does not trust would only come back
                if attempt == 1 or isinstance(exc, (ConnectionRefusedError, ssl.SSLCertVerificationError)):
                    raise ServerUnreachableError(
                        f"request to {self.host}:{self.port}{path} failed: {exc!r}") from None
        raise AssertionError("unreachable")

    def _drop_connection(self) -> None:
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
        self._local.connection = None

    def _get(self, path: str):
        return rest.decode_json(*self._pick(self.request("GET", path)))

    def _post(self, path: str, body: Optional[dict] = None):
        payload = json.dumps(body or {}).encode()
        answer = self.request("POST", path, payload, {"Content-Type": "application/json"})
        return rest.decode_json(*self._pick(answer))

    @staticmethod
    def _pick(answer):
        status, _, body = answer
        return status, body

    def is_live(self) -> bool:
        return self.request("GET", "/v2/health/live")[0] == 200

    def is_ready(self) -> bool:
        return self.request("GET", "/v2/health/ready")[0] == 200

    def is_model_ready(self, model: str, version: str = "") -> bool:
        return self.request("GET", rest.model_path(model, version, "/ready"))[0] == 200

    def server_metadata(self) -> dict:
        return self._get("/v2")

    def model_metadata(self, model: str, version: str = "") -> dict:
        return self._get(rest.model_path(model, version))

    def model_config(self, model: str, version: str = "") -> dict:
        return self._get(rest.model_path(model, version, "/config"))

    def statistics(self, model: str = "", version: str = "") -> dict:
        return self._get(rest.model_path(model, version, "/stats") if model
                         else "/v2/models/stats")

    def repository_index(self, ready: bool = False) -> list:
        return self._post("/v2/repository/index", {"ready": ready})

    def load_model(self, model: str) -> None:
        self._post(f"/v2/repository/models/{rest.quote(model, safe='')}/load")

    def unload_model(self, model: str) -> None:
        self._post(f"/v2/repository/models/{rest.quote(model, safe='')}/unload")

    def infer(self, model: str, inputs: dict, outputs: Optional[list] = None,
              version: str = "", request_id: str = "",
              timeout_us: Optional[int] = None) -> dict:
        """Run ``model`` on ``{name: array}``; returns ``{output name: array}``."""
        body, headers = rest.encode_infer_parts(inputs, outputs, self.binary, request_id, timeout_us)
        status, response_headers, data = self.request(
            "POST", rest.model_path(model, version, "/infer"), body, headers)
        return rest.decode_infer(status, response_headers.get("inference-header-content-length"),
                                 data)

    def close(self) -> None:
        self._drop_connection()

    def __enter__(self) -> "HTTPClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class AsyncHTTPClient:
    """asyncio client over a pool of keep-alive connections (safe for many tasks)."""

    def __init__(self, url: str, token: Optional[str] = None, timeout_s: float = 60.0,
                 binary: bool = True, tls: Optional[TLS] = None):
        host, port, context = _endpoint(url, tls)
        self.binary = binary
        self._auth = _auth(token)
        self._pool = ConnectionPool(host, port, timeout_s, context)

    async def request(self, method: str, path: str, body=b"",
                      headers: Optional[dict] = None) -> tuple[int, dict, bytes]:
        """One raw request (``body``: bytes or a list of bytes-like parts):
        ``(status, lower-cased headers, body)``."""
        return await self._pool.request(method, path, body, {**self._auth, **(headers or {})})

    async def _get(self, path: str):
        status, _, body = await self.request("GET", path)
        return rest.decode_json(status, body)

    async def is_live(self) -> bool:
        return (await self.request("GET", "/v2/health/live"))[0] == 200

    async def is_ready(self) -> bool:
        return (await self.request("GET", "/v2/health/ready"))[0] == 200

    async def is_model_ready(self, model: str, version: str = "") -> bool:
        return (await self.request("GET", rest.model_path(model, version, "/ready")))[0] == 200

    async def server_metadata(self) -> dict:
        return await self._get("/v2")

    async def model_metadata(self, model: str, version: str = "") -> dict:
        return await self._get(rest.model_path(model, version))

    async def model_config(self, model: str, version: str = "") -> dict:
        return await self._get(rest.model_path(model, version, "/config"))

    async def statistics(self, model: str = "", version: str = "") -> dict:
        return await self._get(rest.model_path(model, version, "/stats") if model
                               else "/v2/models/stats")

    async def infer(self, model: str, inputs: dict, outputs: Optional[list] = None,
                    version: str = "", request_id: str = "",
                    timeout_us: Optional[int] = None) -> dict:
        """Run ``model`` on ``{name: array}``; returns ``{output name: array}``."""
        body, headers = rest.encode_infer_parts(inputs, outputs, self.binary, request_id, timeout_us)
        status, response_headers, data = await self.request(
            "POST", rest.model_path(model, version, "/infer"), body, headers)
        return rest.decode_infer(status, response_headers.get("inference-header-content-length"),
                                 data)

    async def close(self) -> None:
        await self._pool.close()

    async def __aenter__(self) -> "AsyncHTTPClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()
