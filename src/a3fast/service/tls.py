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
serve it past its end. At each accepted connection, at most once a second, the files' status is
compared with what was loaded; when it differs, a new context is made from them, and each
connection from then on is given it. A context of its own, not the old one told to use new files:
a TLS session is resumed only under the context that made it (its session id is in that context's
cache, its ticket sealed with that context's keys), so a client certificate of a CA the file no
longer holds is asked for again at the client's next connection and refused. Files caught
half-written make no context: the one in use stays until they read whole.

The service ends TLS itself rather than through the event loop's `create_server(ssl=...)`
(`tls_terminated`): there the HTTP protocol sees a connection only once its handshake is done, so
the head timeout and the connection limit would not reach one that never completes it (the loop's
own handshake timeout is a minute). Each accepted connection is counted at once and given the head
timeout for its handshake.
"""
from __future__ import annotations

import asyncio
import asyncio.sslproto
import datetime
import logging
import os
import ssl
import stat
import time
from typing import Any, Callable

from ..errors import os_error_line

__all__ = ["uvicorn_options", "verified_client", "CertificateReloader", "reload_certificates", "tls_terminated",
           "TLSPort", "listener_context", "validity_problem"]

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
    """`uvicorn_server`'s keyword arguments for these files ({} without TLS): the HTTP protocol,
    and what gives each connection its TLS context (`tls_context`: `reload_certificates`'s
    `CertificateReloader.context`, which `uvicorn_server` ends TLS with)."""
    if cert is None:
        return {}
    return {"http": _protocol_class(peer_certificates=client_ca is not None),
            "tls_context": reload_certificates(cert, key, client_ca).context}


def listener_context(cert: str, key: str | None, client_ca: str | None) -> ssl.SSLContext:
    """A server's TLS context from these files, as uvicorn makes one by default (Python's server
    defaults, its ciphers left as they are), asking for a client certificate without insisting
    when `client_ca` is given (see the module's docstring). A key that asks for a pass phrase is
    refused (ValueError): OpenSSL's own prompt would wait on the terminal, or standard input, with
    the event loop stopped."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key, password=_no_pass_phrase)
    if client_ca is not None:
        context.verify_mode = ssl.CERT_OPTIONAL
        context.load_verify_locations(client_ca)
    return context


def _no_pass_phrase() -> bytes:
    raise ValueError("the key is encrypted; the service takes a key without a pass phrase")


def tls_terminated(protocol_class: type, context: Callable[[], ssl.SSLContext], handshake_timeout: float,
                   max_connections: int) -> "TLSPort":
    """uvicorn's `http` protocol for a TLS port (`TLSPort`)."""
    return TLSPort(protocol_class, context, handshake_timeout, max_connections)


class TLSPort:
    """uvicorn's `http` protocol for a TLS port: each accepted connection runs TLS first (asyncio's
    SSLProtocol over the plain socket, with the context `context()` gives it) and `protocol_class`
    (made with uvicorn's keyword arguments) once its handshake is done. A connection is counted
    from its accept to its close, and one past `max_connections` is closed on accept, as on a plain
    port; a handshake not done within `handshake_timeout` (the head timeout) closes it, and a close
    waits as long for the peer's. `stop`, as the server stops, closes the connections still in
    their handshake and any accepted after."""

    def __init__(self, protocol_class: type, context: Callable[[], ssl.SSLContext], handshake_timeout: float,
                 max_connections: int):
        self.context = context
        self.handshake_timeout = handshake_timeout
        self.open: set[asyncio.BaseProtocol] = set()          # accepted and not yet closed
        self.handshaking: set[asyncio.BaseProtocol] = set()   # of those, the ones not handed on yet
        self.stopping = False
        port = self

        class CountedTLS(asyncio.sslproto.SSLProtocol):
            raw: asyncio.BaseTransport

            def connection_made(self, transport) -> None:
                super().connection_made(transport)
                if port.stopping or len(port.open) >= max_connections:
                    transport.abort()
                    return
                self.raw = transport
                port.open.add(self)
                port.handshaking.add(self)

            def connection_lost(self, exc) -> None:
                port.open.discard(self)
                port.handshaking.discard(self)
                super().connection_lost(exc)

        class AfterHandshake(protocol_class):
            tls_layer: Any = None

            def connection_made(self, transport) -> None:
                port.handshaking.discard(self.tls_layer)
                super().connection_made(transport)
                if port.stopping:
                    # its handshake ended while the server stops: were it answered, a client that
                    # keeps its connection would hold the stop for its whole grace
                    transport.abort()

        self._layer, self._protocol = CountedTLS, AfterHandshake

    def __call__(self, **kwargs: Any) -> asyncio.BaseProtocol:
        loop = kwargs.get("_loop") or asyncio.get_event_loop()
        app = self._protocol(**kwargs)
        # no waiter (asyncio's stubs ask for one): a future here would log every failed handshake
        # as an exception never retrieved; and a timeout in seconds, as a float (stubs: int)
        # a close waits for the peer's own as long as a handshake may take, not asyncio's 30 s
        app.tls_layer = layer = self._layer(loop, app, self.context(), None,  # type: ignore[arg-type]
                                            server_side=True,
                                            ssl_handshake_timeout=self.handshake_timeout,  # type: ignore[arg-type]
                                            ssl_shutdown_timeout=self.handshake_timeout)
        return layer

    def stop(self) -> None:
        """The server stops: a connection still in its handshake is closed, and so is one accepted
        or handed on from now on (uvicorn shuts down the connections it holds)."""
        self.stopping = True
        for layer in list(self.handshaking):
            layer.raw.abort()  # type: ignore[attr-defined]


class CertificateReloader:
    """Gives each new connection the TLS context made from the files as they are (see the
    module's docstring): `make_context` makes one from `paths`."""

    def __init__(self, make_context: Callable[[], ssl.SSLContext], paths: list[str],
                 clock: Callable[[], float] = time.monotonic):
        self._make = make_context
        self._paths = paths
        self._clock = clock
        self._loaded = self._status()
        #: the context new connections get
        self.current = make_context()
        self._checked = clock()
        self._refused: str | None = None

    def _status(self) -> tuple:
        """What tells that a file changed: its status, following links (a Secret's files are links
        that its update moves), or why it cannot be read."""
        status: list[Any] = []
        for path in self._paths:
            try:
                st = os.stat(path)
                status.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode))
            except OSError as exc:
                status.append(exc.errno)
        return tuple(status)

    def _not_a_file(self, status: tuple) -> str | None:
        """Why the files of `status` make no context without being read: one that is there and is
        no regular file (a FIFO's read would wait for a writer with the event loop stopped, a
        device's might never end), as the start-up refuses it; None when each is one, or is not
        there (opening it says why)."""
        for path, entry in zip(self._paths, status):
            if isinstance(entry, tuple) and not stat.S_ISREG(entry[4]):
                return f"{path}: not a regular file"
        return None

    def context(self) -> ssl.SSLContext:
        """The context for a connection accepted now, the files looked at first if a second has
        passed since they last were."""
        try:
            now = self._clock()
            if now - self._checked >= RELOAD_CHECK_S:
                self._checked = now
                self.check()
        except Exception:         # a connection is never refused for this: the context in use serves
            log.exception("TLS: could not look at the certificate files")
        return self.current

    def check(self) -> bool:
        """Make a new context if the files changed since the last one was made; whether one was."""
        status = self._status()
        if status == self._loaded:
            # back to the files loaded (a Secret's link moved back): their next failure is said again
            self._refused = None
            return False
        refused = self._not_a_file(status)
        if refused is None:
            try:
                self.current = self._make()
            except (OSError, ssl.SSLError, ValueError) as exc:
                # the system's words for a file it does not read (`tls.key: No such file or
                # directory`), OpenSSL's for one it does not take
                refused = (os_error_line(exc) if isinstance(exc, OSError) and not isinstance(exc, ssl.SSLError)
                           else str(exc))
        if refused is not None:
            if refused != self._refused:    # said once, not at every connection until they read whole
                log.warning("TLS: the changed certificate files do not load (%s); the certificate "
                            "loaded before is still served", refused)
                self._refused = refused
            return False
        self._loaded, self._refused = status, None
        log.warning("TLS: the certificate files changed; new connections get them")
        dates = validity_problem(self._paths[0])
        if dates is not None:
            log.warning("TLS: %s; clients refuse it until it is renewed", dates)
        return True


def validity_problem(cert: str, now: datetime.datetime | None = None) -> str | None:
    """What is wrong with the dates of the first certificate in file `cert` (the server's own):
    that it expired, or is not valid yet; None when it is valid `now`, or when it cannot be read
    here (loading the context says what is wrong then)."""
    from cryptography import x509

    try:
        with open(cert, "rb") as f:
            certificate = x509.load_pem_x509_certificate(f.read())
    except (OSError, ValueError):
        return None
    now = now or datetime.datetime.now(datetime.timezone.utc)
    utc = datetime.timezone.utc
    # the `_utc` forms are cryptography 42's; 41 has the naive ones only
    until = getattr(certificate, "not_valid_after_utc", None) or certificate.not_valid_after.replace(tzinfo=utc)
    since = getattr(certificate, "not_valid_before_utc", None) or certificate.not_valid_before.replace(tzinfo=utc)
    if until < now:
        return f"its certificate expired at {until:%Y-%m-%d %H:%M:%S} UTC"
    if since > now:
        return f"its certificate is not valid until {since:%Y-%m-%d %H:%M:%S} UTC"
    return None


def reload_certificates(cert: str, key: str | None, client_ca: str | None) -> CertificateReloader:
    """The contexts of these files for each new connection, made again when they change
    (`CertificateReloader`, each by `listener_context`)."""
    return CertificateReloader(lambda: listener_context(cert, key, client_ca),
                               [path for path in (cert, key, client_ca) if path is not None])
