"""The HTTP server under the app: uvicorn, with the limits a client cannot hold it past.

uvicorn closes an idle keep-alive connection after `keep_alive` seconds, but a connection that has
sent part of a request head (or nothing at all) is kept for as long as the client likes, and it
accepts connections until the process runs out of file descriptors. `GuardedProtocol` adds the
two missing limits: a request head must arrive whole within `header_timeout` seconds of the
connection opening (or of the previous answer), and a connection past `max_connections` is closed
as soon as it is accepted. The body has its own deadline in the app (`app.receive_body`).
"""
from __future__ import annotations

import resource
import socket

import uvicorn
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from .config import ServiceConfig

__all__ = ["uvicorn_server", "connection_limit"]

#: File descriptors kept free of connections for the state, journal, trace and worker threads.
SPARE_FDS = 64


def connection_limit(config: ServiceConfig) -> int:
    """--max-connections, or by default the process's open-file limit less SPARE_FDS."""
    if config.max_connections is not None:
        return config.max_connections
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 65_536
    return max(16, min(soft, 65_536) - SPARE_FDS)


def guarded_protocol(header_timeout: float, max_connections: int, base: type = AutoHTTPProtocol) -> type:
    """uvicorn's HTTP protocol `base` with the head timeout and the connection limit."""
    class GuardedProtocol(base):
        _head_timer = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                transport.close()
                return
            self._await_head()

        def data_received(self, data: bytes) -> None:
            cycle = self.cycle
            super().data_received(data)
            if self.cycle is not cycle:          # a whole head arrived: the body has its own deadline
                self._cancel_head_timer()
            elif self.cycle is None or self.cycle.response_complete:
                self._await_head()               # part of a head, between requests

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


#: How often a worker thread (verifying a posted trace, parsing a large body) hands the interpreter
#: back to the event loop's thread: Python's default is 5 ms, and a request needs several handoffs.
SWITCH_INTERVAL_S = 0.001


def uvicorn_server(app, config: ServiceConfig, **options) -> uvicorn.Server:
    """The server for `app`; `options` go to uvicorn.Config as they are (TLS settings, say), an
    `http` protocol class among them getting the limits too."""
    import sys

    sys.setswitchinterval(SWITCH_INTERVAL_S)
    base = options.pop("http", AutoHTTPProtocol)
    return uvicorn.Server(uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="on", loop="auto",
        http=guarded_protocol(config.header_timeout, connection_limit(config), base),
        timeout_keep_alive=config.keep_alive, timeout_graceful_shutdown=30,  # type: ignore[arg-type]
        proxy_headers=False, server_header=False, **options))


def listening_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    return sock
