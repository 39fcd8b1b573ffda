"""TLS for both front ends, from ``--ssl-certfile`` and ``--ssl-keyfile`` (and
``--ssl-ca-certs``: clients must then present a certificate those CAs signed, mutual TLS).

The HTTP port gets a standard-library context: TLS 1.2 or later with the server
defaults and ALPN offering ``http/1.1``. The gRPC port gets grpcio's credentials from the
same files (grpc-core offers ``h2`` and TLS 1.2 or later itself); the files are checked
with the standard library first, so both ports fail alike and before anything listens::

    context = server_context(settings, "http/1.1")   # None when TLS is off
    credentials = grpc_credentials(settings)          # None when TLS is off
"""

from __future__ import annotations

import pathlib
import ssl
from typing import Optional

import grpc

from .errors import ServerConfigError


def server_context(settings, protocol: str) -> Optional[ssl.SSLContext]:
    """The TLS context of a port speaking ``protocol`` (an ALPN id), or None without
    ``settings.ssl_certfile``."""
    if not settings.ssl_certfile:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(settings.ssl_certfile, settings.ssl_keyfile)
    except (OSError, ssl.SSLError) as exc:
        raise ServerConfigError(f"--ssl-certfile {settings.ssl_certfile} with --ssl-keyfile "
                                f"{settings.ssl_keyfile}: expected a PEM certificate chain and its "
                                f"private key: {exc}") from None
    if settings.ssl_ca_certs:
        try:
            context.load_verify_locations(settings.ssl_ca_certs)
        except (OSError, ssl.SSLError) as exc:
            raise ServerConfigError(f"--ssl-ca-certs {settings.ssl_ca_certs}: expected PEM CA "
                                    f"certificates: {exc}") from None
        context.verify_mode = ssl.CERT_REQUIRED
    context.set_alpn_protocols([protocol])
    return context


def grpc_credentials(settings) -> Optional[grpc.ServerCredentials]:
    """grpcio's server credentials from the same files as ``server_context`` (client
    certificates required with ``settings.ssl_ca_certs``), or None without TLS."""
    if server_context(settings, "h2") is None:  # None without TLS; a clear error for bad files
        return None
    chain = pathlib.Path(settings.ssl_certfile).read_bytes()
    key = pathlib.Path(settings.ssl_keyfile).read_bytes() if settings.ssl_keyfile else chain
    roots = pathlib.Path(settings.ssl_ca_certs).read_bytes() if settings.ssl_ca_certs else None
    return grpc.ssl_server_credentials([(key, chain)], root_certificates=roots,
                                       require_client_auth=roots is not None)
