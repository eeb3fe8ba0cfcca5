"""TLS for `a3fast serve`: a server certificate, and client certificates checked for the
Kubernetes extender routes (kube-scheduler's Extender config authenticates only that way, with its
`tlsConfig` certFile/keyFile; it has no header or token field).

The server asks every client for a certificate but does not insist (CERT_OPTIONAL), because the
kubelet's HTTPS probes of /healthz and /readyz present none; a certificate that is presented must
verify against --tls-client-ca or the handshake fails. Which connections presented a verified one
is not in the ASGI scope uvicorn builds, so the HTTP protocol is wrapped to add it, as the ASGI TLS
extension names it: scope["extensions"]["tls"]["client_cert_name"] (the subject, or None) and
["client_cert_error"] (None when a certificate was presented and verified). The app then accepts
/k8s/* only on a verified certificate (a3fast.service.app, Guard).
"""
from __future__ import annotations

import ssl
from typing import Any

__all__ = ["uvicorn_options", "verified_client"]

NO_CERTIFICATE = "no client certificate presented"


def verified_client(scope) -> bool:
    """Whether the connection presented a client certificate that verified against the CA."""
    tls = scope.get("extensions", {}).get("tls")
    return tls is not None and tls.get("client_cert_error") is None and tls.get("client_cert_name") is not None


def _subject(cert: dict[str, Any]) -> str:
    return ",".join(f"{key}={value}" for rdn in cert.get("subject", ()) for key, value in rdn)


def _with_peer(app, tls: dict[str, Any]):
    async def asgi(scope, receive, send):
        extensions = dict(scope.get("extensions") or {})
        extensions["tls"] = tls
        scope["extensions"] = extensions
        await app(scope, receive, send)
    return asgi


def _protocol_class():
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    class PeerCertificateProtocol(AutoHTTPProtocol):  # type: ignore[valid-type, misc]
        """The HTTP protocol of uvicorn, with the connection's client certificate in each scope."""

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            cert = transport.get_extra_info("peercert")
            # with CERT_OPTIONAL, a certificate that is presented and does not verify ends the
            # handshake before this is called: a certificate here is a verified one
            tls = {"client_cert_name": _subject(cert) if cert else None,
                   "client_cert_error": None if cert else NO_CERTIFICATE}
            # the protocol answers each request of this connection with `self.app`
            setattr(self, "app", _with_peer(getattr(self, "app"), tls))
    return PeerCertificateProtocol


def uvicorn_options(cert: str | None, key: str | None, client_ca: str | None) -> dict[str, Any]:
    """uvicorn.Config keyword arguments for these files ({} without TLS)."""
    if cert is None:
        return {}
    options: dict[str, Any] = {"ssl_certfile": cert, "ssl_keyfile": key}
    if client_ca is not None:
        options.update(ssl_ca_certs=client_ca, ssl_cert_reqs=ssl.CERT_OPTIONAL, http=_protocol_class())
    return options
