"""The HTTP server under the app: uvicorn, with the limits a client cannot hold it past.

uvicorn closes an idle keep-alive connection after `keep_alive` seconds, but a connection that has
sent part of a request head (or nothing at all) is kept for as long as the client likes, and it
accepts connections until the process runs out of file descriptors. `GuardedProtocol` adds the
missing limits: a request head must arrive whole within `header_timeout` seconds of the
connection opening (or of the previous answer) and in at most MAX_HEAD_BYTES (h11 has such a
bound, httptools none: a head that never ended grew the server by what it sent), and a connection
past `max_connections` is closed as soon as it is accepted. The body has its own deadline in the app (`app.receive_body`).

uvicorn writes an answer's head (status line and headers) and its body with a write each: two
system calls, and on a keep-alive connection the client is woken twice. With httptools (the
`serve` extra), `OneWriteAnswers` holds the head until the body's first write and sends them
together.
"""
from __future__ import annotations

import resource
import socket
import sys
import time
from typing import Any

import orjson
import uvicorn
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from . import metrics
from .access_log import access_line
from .config import ServiceConfig
from .problems import problem
from .tls import TLSPort, tls_terminated

__all__ = ["uvicorn_server", "connection_limit"]

#: File descriptors kept free of connections for the state, journal, trace and worker threads.
SPARE_FDS = 64

#: The most bytes a request head may take (request line and headers), as uvicorn's h11 protocol
#: allows; past it the answer is 431 and the connection is closed.
MAX_HEAD_BYTES = 16 * 1024
#: What the reads that carried a head may hold beyond it (the end of the body before it, in the same
#: read): a head still open past MAX_HEAD_BYTES + READ_SLACK of them is refused unparsed, so one
#: that never ends (httptools keeps a field's bytes until it ends) holds at most this much.
READ_SLACK = 256 * 1024


class _HeadTooLarge(Exception):
    """Raised in the parser's callbacks to stop it: the head is refused."""


def _refusal(head_too_large: bool, message: str) -> tuple[int, bytes, bytes]:
    """The answer to bytes that are no request the server reads, with the problems every refusal
    carries (where uvicorn answered text): 431 for a head past MAX_HEAD_BYTES, else 400. Its
    status, body, and the whole answer."""
    if head_too_large:
        code, status = 431, b"431 Request Header Fields Too Large"
        found = problem("$", f"a request head (request line and headers) of at most {MAX_HEAD_BYTES} bytes",
                        "a longer one")
    else:
        code, status = 400, b"400 Bad Request"
        found = problem("$", "an HTTP/1.1 request", message.rstrip(".") or "bytes that are none")
    body = orjson.dumps({"problems": [found]})
    return code, body, (b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\nx-content-type-options: "
                        b"nosniff\r\nconnection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n"
                        + body)


def connection_limit(config: ServiceConfig) -> int:
    """--max-connections, or by default the process's open-file limit less SPARE_FDS."""
    if config.max_connections is not None:
        return config.max_connections
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 65_536
    return max(16, min(soft, 65_536) - SPARE_FDS)


class OneWriteAnswers:
    """The transport as one request's response cycle sees it: the head of the answer (the cycle's
    first write once its response has started) is held and written together with the first write
    of the body, or on its own when the answer ends without one (a HEAD request) or when that
    first write is larger than `JOIN_AT_MOST` (joining would copy it: a copy of a large body costs
    more than the system call it saves). Every other write — an interim `100 Continue`, later body
    chunks — and everything else pass straight through."""

    #: bytes of a body's first write up to which the head is joined to it
    JOIN_AT_MOST = 64 * 1024

    __slots__ = ("transport", "cycle", "head", "state", "on_response")

    #: states: the answer has not started, its head is held, the head is out
    WAITING, HELD, SENT = 0, 1, 2

    def __init__(self, transport, cycle):
        self.transport = transport
        self.cycle = cycle
        self.head = b""
        self.state = self.WAITING
        self.on_response = cycle.on_response

    @classmethod
    def install(cls, cycle) -> None:
        """Route the cycle's writes, and the end of its answer, through a new instance."""
        held = cls(cycle.transport, cycle)
        cycle.transport = held
        cycle.on_response = held.answered

    def write(self, data: bytes) -> None:
        if self.transport.is_closing():
            # the client is gone: uvicorn marks only the newest cycle of a pipeline disconnected, so
            # an older one still answering wrote to a closed transport (uvloop raises)
            self.cycle.disconnected = True
            return
        if self.state == self.SENT:
            self.transport.write(data)
        elif self.state == self.HELD:
            self.state = self.SENT
            if len(data) <= self.JOIN_AT_MOST:
                self.transport.write(self.head + data)
            else:
                self.transport.write(self.head)
                self.transport.write(data)
            self.head = b""
        elif self.cycle.response_started:
            self.head, self.state = bytes(data), self.HELD
        else:
            self.transport.write(data)

    def flush(self) -> None:
        """The held head, if any, on its own."""
        if self.state == self.HELD and not self.transport.is_closing():
            self.state = self.SENT
            self.transport.write(self.head)
            self.head = b""

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def answered(self) -> None:
        """The answer is complete: nothing may stay held."""
        self.flush()
        self.on_response()

    def __getattr__(self, name: str):
        return getattr(self.transport, name)


def guarded_protocol(header_timeout: float, max_connections: int, base: type = AutoHTTPProtocol,
                     access_log: bool = False) -> type:
    """uvicorn's HTTP protocol `base` with the head timeout and the connection limit, and (httptools)
    each answer written at once by `OneWriteAnswers`; the answers it gives itself (bytes that are
    no request, a head too large) are timed and, with `access_log`, logged as the app's are."""
    # httptools' protocol starts each request's cycle here; h11's writes its answers differently
    one_write = hasattr(base, "_start_asgi_task")

    class GuardedProtocol(base):
        _head_timer = None
        _head_open = False      # a request has begun and its head has not ended
        _head_bytes = 0         # of the reads since a request began, while its head is open
        _head_refused = False

        if one_write:
            def _start_asgi_task(self, cycle, app) -> None:
                OneWriteAnswers.install(cycle)
                super()._start_asgi_task(cycle, app)

            # httptools' parser calls: a head that arrived whole is measured once it has ended
            def on_message_begin(self) -> None:
                self._began = time.perf_counter()
                self._head_bytes = 0
                self._head_open = True
                super().on_message_begin()

            def on_headers_complete(self) -> None:
                self._head_open = False
                size = len(self.url)
                for name, value in self.headers:
                    size += len(name) + len(value) + 4
                if size > MAX_HEAD_BYTES:
                    self._head_refused = True
                    raise _HeadTooLarge   # the parser stops; uvicorn answers by send_400_response
                super().on_headers_complete()

        def send_400_response(self, msg: str) -> None:
            code, body, answer = _refusal(self._head_refused, msg)
            self.transport.write(answer)
            self.transport.close()
            # an answer given below the app is logged and timed as the app's are: the request it
            # answers could not be read, so its method and path are shown as "-"
            seconds = time.perf_counter() - self._began
            metrics.observe_request("unmatched", "-", seconds)
            if access_log:
                sys.stderr.write(access_line(self.client, "-", "-", code, len(body), seconds) + "\n")
                sys.stderr.flush()

        def connection_made(self, transport) -> None:
            self._began = time.perf_counter()
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                transport.close()
                return
            self._await_head()

        def data_received(self, data: bytes) -> None:
            cycle = self.cycle
            if (cycle is None or cycle.response_complete) and not self._head_open:
                self._began = time.perf_counter()      # the bytes of a new request begin
            super().data_received(data)
            if self.cycle is not cycle:          # a whole head arrived: the body has its own deadline
                self._cancel_head_timer()
            elif self.cycle is None or self.cycle.response_complete:
                self._await_head()               # part of a head, between requests
            if self._head_open:                  # httptools: a head begun and not ended
                self._head_bytes += len(data)
                if self._head_bytes > MAX_HEAD_BYTES + READ_SLACK and not self.transport.is_closing():
                    self._head_refused = True
                    self.send_400_response("")

        def connection_lost(self, exc) -> None:
            self._cancel_head_timer()
            super().connection_lost(exc)

        def _await_head(self) -> None:
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(header_timeout, self._head_too_late)

        def _cancel_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_too_late(self) -> None:
            self._head_timer = None
            if self.cycle is None or self.cycle.response_complete:
                self.transport.close()

    return GuardedProtocol


#: How uvicorn's and a3fast's loggers write: one line on standard error each, with the prefix every
#: line of the command carries (uvicorn's own default prints "WARNING:  ..." and a3fast's loggers,
#: unconfigured, a bare message).
PREFIXED_LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"prefixed": {"format": "a3fast: %(message)s"},
                   "leveled": {"format": "a3fast: %(levelname)s: %(message)s"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "prefixed", "stream": "ext://sys.stderr"},
                 "leveled": {"class": "logging.StreamHandler", "formatter": "leveled", "stream": "ext://sys.stderr"}},
    "loggers": {"uvicorn": {"handlers": ["leveled"], "level": "WARNING", "propagate": False},
                "uvicorn.error": {"level": "WARNING"},
                "uvicorn.access": {"handlers": ["stderr"], "level": "WARNING", "propagate": False},
                "a3fast": {"handlers": ["stderr"], "level": "WARNING", "propagate": False}},
}

#: How often a worker thread (verifying a posted trace, parsing a large body) hands the interpreter
#: back to the event loop's thread: Python's default is 5 ms, and a request needs several handoffs.
SWITCH_INTERVAL_S = 0.001


def uvicorn_server(app, config: ServiceConfig, **options) -> uvicorn.Server:
    """The server for `app`; `options` go to uvicorn.Config as they are (TLS settings, say), an
    `http` protocol class among them getting the limits too."""
    import sys

    sys.setswitchinterval(SWITCH_INTERVAL_S)
    base = options.pop("http", AutoHTTPProtocol)
    tls_context = options.pop("tls_context", None)
    options.setdefault("log_config", PREFIXED_LOGGING)
    limit = connection_limit(config)
    http: Any = guarded_protocol(config.header_timeout, limit, base, config.access_log)
    tls_port = None
    if tls_context is not None:       # TLS ended here, counted and timed from the accept (a3fast.service.tls)
        http = tls_port = tls_terminated(http, tls_context, config.header_timeout, limit)
    return _Server(uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="on", loop="auto", http=http,
        timeout_keep_alive=config.keep_alive, timeout_graceful_shutdown=30,  # type: ignore[arg-type]
        proxy_headers=False, server_header=False, **options), tls_port)


class _Server(uvicorn.Server):
    """uvicorn's server, whose stop first closes a TLS port's connections still in their handshake
    (`TLSPort.stop`): uvicorn holds only those handed on to HTTP."""

    def __init__(self, config: uvicorn.Config, tls_port: TLSPort | None):
        super().__init__(config)
        self.tls_port = tls_port

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.tls_port is not None:
            self.tls_port.stop()
        await super().shutdown(sockets)


def listening_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    return sock
