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

The files are read again when they change (`CertificateReloader`): cert-manager, or a Secret
updated by hand, renews them in place, and a server that kept the certificate it started with would
serve it past its end. At each TLS handshake, at most once a second, the files' status is compared
with what was loaded; when it differs, a new context is made from them, and each handshake from then
on is given it (`SSLObject.context`, set in the ClientHello callback, which OpenSSL calls whether or
not the client sends a server name). Files caught half-written make no context: the one in use stays
until they read whole.
"""
from __future__ import annotations

import logging
import os
import ssl
import time
from typing import Any, Callable

__all__ = ["uvicorn_options", "verified_client", "CertificateReloader", "reload_certificates"]

log = logging.getLogger("a3fast.serve.tls")

#: The least time between two looks at the TLS files' status (a handshake costs far more).
RELOAD_CHECK_S = 1.0

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


def _protocol_class(peer_certificates: bool):
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    class TLSProtocol(AutoHTTPProtocol):  # type: ignore[valid-type, misc]
        """The HTTP protocol of uvicorn over TLS: with `peer_certificates`, the connection's client
        certificate in each scope; and a stop that does not wait on idle peers."""

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            if not peer_certificates:
                return
            cert = transport.get_extra_info("peercert")
            # with CERT_OPTIONAL, a certificate that is presented and does not verify ends the
            # handshake before this is called: a certificate here is a verified one
            tls = {"client_cert_name": _subject(cert) if cert else None,
                   "client_cert_error": None if cert else NO_CERTIFICATE}
            # the protocol answers each request of this connection with `self.app`
            setattr(self, "app", _with_peer(getattr(self, "app"), tls))

        def shutdown(self) -> None:
            # A TLS close waits up to 30 s for the peer's close_notify, which an idle keep-alive
            # peer (kube-scheduler's connection pool, a probe's client) never sends: a stopping
            # server would hang that long. An idle connection is dropped instead; one with a
            # request under way is answered first, as uvicorn does.
            idle = self.cycle is None or self.cycle.response_complete
            super().shutdown()
            if idle:
                self.transport.abort()
    return TLSProtocol


def uvicorn_options(cert: str | None, key: str | None, client_ca: str | None) -> dict[str, Any]:
    """uvicorn.Config keyword arguments for these files ({} without TLS)."""
    if cert is None:
        return {}
    options: dict[str, Any] = {"ssl_certfile": cert, "ssl_keyfile": key,
                               "http": _protocol_class(peer_certificates=client_ca is not None)}
    if client_ca is not None:
        options.update(ssl_ca_certs=client_ca, ssl_cert_reqs=ssl.CERT_OPTIONAL)
    return options


class CertificateReloader:
    """Hands each TLS handshake the context made from the files as they are now (see the module's
    docstring): `make_context` makes one from `paths`; `install` sets it up on the listener's."""

    def __init__(self, make_context: Callable[[], ssl.SSLContext], paths: list[str],
                 clock: Callable[[], float] = time.monotonic):
        self._make = make_context
        self._paths = paths
        self._clock = clock
        self._loaded = self._status()
        self._checked = clock()
        #: the context made after the files changed (None: the listener's own still serves)
        self.current: ssl.SSLContext | None = None
        self._refused: str | None = None

    def install(self, listener: ssl.SSLContext) -> None:
        listener.sni_callback = self._hello

    def _status(self) -> tuple:
        """What tells that a file changed: its status, following links (a Secret's files are links
        that its update moves), or why it cannot be read."""
        status: list[Any] = []
        for path in self._paths:
            try:
                st = os.stat(path)
                status.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
            except OSError as exc:
                status.append(exc.errno)
        return tuple(status)

    def _hello(self, ssl_object: Any, server_name: str | None, listener: ssl.SSLContext) -> None:
        try:
            now = self._clock()
            if now - self._checked >= RELOAD_CHECK_S:
                self._checked = now
                self.check()
            if self.current is not None:
                ssl_object.context = self.current
        except Exception:         # a handshake is never failed for this: the context in use serves
            log.exception("TLS: could not look at the certificate files")
        return None

    def check(self) -> bool:
        """Make a new context if the files changed since the last one was made; whether one was."""
        status = self._status()
        if status == self._loaded:
            return False
        try:
            fresh = self._make()
        except (OSError, ssl.SSLError, ValueError) as exc:
            refused = f"{type(exc).__name__}: {exc}"
            if refused != self._refused:    # said once, not at every handshake until they read whole
                log.warning("TLS: the changed certificate files do not load (%s); the certificate "
                            "loaded before is still served", refused)
                self._refused = refused
            return False
        self._loaded, self.current, self._refused = status, fresh, None
        log.warning("TLS: the certificate files changed; new connections get them")
        return True


def _no_pass_phrase() -> bytes:
    raise ValueError("the key is encrypted; the service takes a key without a pass phrase")


def reload_certificates(config: Any, cert: str, key: str | None, client_ca: str | None) -> CertificateReloader:
    """Load uvicorn's `config` (its listener context made from the files), and have every handshake
    use the files as they are (`CertificateReloader`), each new context made as uvicorn makes it."""
    if not config.loaded:
        config.load()

    def make() -> ssl.SSLContext:
        # as uvicorn's `create_ssl_context` makes the listener's, but a key that asks for a pass
        # phrase is refused: OpenSSL's own prompt would wait on the terminal (or standard input)
        # with the event loop stopped, every request held and a stop signal unanswered
        context = ssl.SSLContext(config.ssl_version)
        context.load_cert_chain(cert, key, password=_no_pass_phrase)
        context.verify_mode = ssl.VerifyMode(config.ssl_cert_reqs)
        if config.ssl_ca_certs:
            context.load_verify_locations(config.ssl_ca_certs)
        if config.ssl_ciphers:
            context.set_ciphers(config.ssl_ciphers)
        return context

    reloader = CertificateReloader(make, [path for path in (cert, key, client_ca) if path is not None])
    reloader.install(config.ssl)
    return reloader
