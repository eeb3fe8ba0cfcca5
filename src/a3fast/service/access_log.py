"""The access log of `a3fast serve --access-log`: one line on standard error per answered request.

    a3fast: 127.0.0.1:50312 "POST /v1/place" 200 1,834 B 0.41 ms

Who asked, what, the status, the bytes of the answer's body and the time from the request's arrival
to its last byte. Off by default: a line per placement costs a write, and most deployments log at a
proxy in front.
"""
from __future__ import annotations

import sys
import time
from typing import TextIO

from ..errors import printable
from ..streams import status_line

__all__ = ["AccessLog", "access_line"]


def access_line(client: tuple[str, int] | None, method: str, path: str, status: int, size: int,
                seconds: float) -> str:
    who = f"{client[0]}:{client[1]}" if client else "-"
    # the quoted field stays one field: a quote or backslash in the path is escaped as in JSON, and
    # anything unprintable as `errors.printable` writes it
    request = printable(f"{method} {path}".replace("\\", "\\\\").replace('"', '\\"'))
    return f'a3fast: {who} "{request}" {status} {size:,} B {seconds * 1e3:.2f} ms'


class AccessLog:
    """ASGI middleware writing `access_line` for every HTTP request once its answer is complete (a
    request whose answer never started, as when the client went away, logs status 0)."""

    def __init__(self, app, stream: TextIO | None = None):
        self.app = app
        self.stream = stream

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        status, size = 0, 0

        async def counting_send(message):
            nonlocal status, size
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                size += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        finally:
            path = scope.get("raw_path", b"").decode("latin-1") or scope.get("path", "")
            stream = self.stream or sys.stderr
            status_line(access_line(scope.get("client"), scope.get("method", "-"), path, status, size,
                                    time.perf_counter() - started), stream)
