"""TLS for the clients: which certificate authorities to trust, and the client's own
certificate for servers that require one (``flowserve serve --ssl-ca-certs``)::

    from flowserve.clients import HTTPClient, GRPCClient, TLS
    HTTPClient("https://models.example:8000")                  # the system's trusted CAs
    tls = TLS(ca_file="ca.pem", cert_file="client.pem", key_file="client.key")
    GRPCClient("models.example:8001", tls=tls)                  # mutual TLS
"""

from __future__ import annotations

import dataclasses
import pathlib
import ssl
from typing import Optional

import grpc


@dataclasses.dataclass(frozen=True)
class TLS:
    """``ca_file``: PEM CA certificates to trust (None: the system's); ``cert_file`` and
    ``key_file``: the client's certificate chain and key, for mutual TLS (the key may sit in
    ``cert_file``). The server's name is checked against its certificate."""

    ca_file: Optional[str] = None
    cert_file: Optional[str] = None
    key_file: Optional[str] = None

    def context(self, protocol: str) -> ssl.SSLContext:
        """A client context offering ``protocol`` by ALPN (``h2``, ``http/1.1``)."""
        context = ssl.create_default_context(cafile=self.ca_file)
        if self.cert_file:
            context.load_cert_chain(self.cert_file, self.key_file)
        context.set_alpn_protocols([protocol])
        return context

    def grpc_credentials(self) -> grpc.ChannelCredentials:
        """The same trust and identity as grpcio channel credentials."""
        def read(path: Optional[str]) -> Optional[bytes]:
            return pathlib.Path(path).read_bytes() if path else None

        key = self.key_file or self.cert_file
        return grpc.ssl_channel_credentials(read(self.ca_file), read(key) if self.cert_file else None,
                                            read(self.cert_file))
