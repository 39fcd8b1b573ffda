"""TLS for both front ends, from ``--ssl-certfile`` and ``--ssl-keyfile`` (and
``--ssl-ca-certs``: clients must then present a certificate those CAs signed, mutual TLS).

One server context per port, built the same way: TLS 1.2 or later with the standard
library's server defaults, and ALPN offering the port's protocol (``h2`` for gRPC, whose
clients insist on it; ``http/1.1`` for HTTP)::

    context = server_context(settings, "h2")   # None when TLS is off
"""

from __future__ import annotations

import ssl
from typing import Optional

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
