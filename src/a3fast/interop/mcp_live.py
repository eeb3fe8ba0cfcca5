"""Tool listings read from running MCP servers, with the official `mcp` SDK's client.

A server is started from a command line (stdio) or reached at a URL (streamable HTTP). The client
initializes a session (the initialize handshake) and pages through `tools/list`, passing each
page's `nextCursor` back until a page names none. Each page becomes a document, in the JSON shape
the server sent (`{"tools": [...], "nextCursor"?}`), so the tools and their annotations are read by
exactly the code that reads listing files (`mcp.read_page`).

A live server is hostile input too: the whole listing has a deadline, the number of pages is
bounded, and a server whose `nextCursor` repeats one it already gave (a cycle) is stopped with an
error rather than followed forever. Any error leaves no pages: a listing is used whole or not at
all, since a partial one would bind agents to fewer tools than the server has.

A streamable HTTP listing verifies the server with one TLS context shared by every listing of the
process (`tls_context`), as the SDK's own client would build it. Building it loads the whole CA
bundle, about 25 ms of CPU time, which a watch listing its servers every few seconds would
otherwise pay on every listing, for an http:// URL too (the HTTP client builds its context whether
or not it connects with TLS).
"""
from __future__ import annotations

import contextlib
import os
import shlex
import ssl
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from .fetch import without_credentials
from .sources import Document

if sys.version_info < (3, 11):  # Python 3.10: anyio depends on the backport
    from exceptiongroup import BaseExceptionGroup

__all__ = ["ServerSpec", "LiveListing", "ListingError", "list_tools", "MAX_PAGES", "TLS_CONTEXT_MAX_AGE"]

#: Most pages of one listing read (a real server's listing is a page or a few).
MAX_PAGES = 1000

#: Seconds one TLS context serves listings before it is built again, so that a long-running watch
#: trusts a renewed CA bundle within this long.
TLS_CONTEXT_MAX_AGE = 600.0


class ListingError(Exception):
    """A server whose tools could not be listed: `server` says which, `message` why."""

    def __init__(self, server: str, message: str):
        # the client's own errors quote the URL it was given, password and all
        server, message = without_credentials(server), without_credentials(message)
        super().__init__(f"{server}: {message}")
        self.server = server
        self.message = message


@dataclass(frozen=True)
class ServerSpec:
    """An MCP server: a command line run over stdio, or a streamable HTTP URL."""

    command: tuple[str, ...] = ()
    url: str | None = None

    @classmethod
    def from_command(cls, line: str) -> "ServerSpec":
        try:
            argv = tuple(shlex.split(line))
        except ValueError as exc:
            raise ListingError(line, f"not a command line ({exc})") from None
        if not argv:
            raise ListingError(line, "an empty command line")
        return cls(command=argv)

    @property
    def label(self) -> str:
        """The server as messages and reports name it (a URL without its user name or password)."""
        return without_credentials(self.url) if self.url is not None else shlex.join(self.command)

    def tool_server(self, name: str | None) -> dict[str, Any]:
        """How a bound agent reaches this server's tools, as recorded in its declaration (a URL
        without its user name or password: the declaration goes into every record of a placement)."""
        if self.url is not None:
            where: dict[str, Any] = {"transport": "streamable-http", "url": without_credentials(self.url)}
        else:
            where = {"transport": "stdio", "command": list(self.command)}
        return {**({"name": name} if name else {}), **where}


@dataclass
class LiveListing:
    spec: ServerSpec
    pages: list[dict[str, Any]] = field(default_factory=list)
    server_name: str | None = None
    server_version: str | None = None
    #: every page read, the last without a nextCursor (what the session's teardown cannot undo)
    complete: bool = False

    def documents(self) -> list[Document]:
        return [Document(self.spec.label, f"page {i + 1}: $", page) for i, page in enumerate(self.pages)]


def list_tools(spec: ServerSpec, *, timeout: float = 30.0, max_pages: int = MAX_PAGES) -> LiveListing:
    """Every page of the server's `tools/list`, or ListingError (module doc)."""
    import anyio

    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
        try:
            return anyio.run(_list, spec, timeout, max_pages, errlog)
        except ListingError:
            raise
        except TimeoutError:
            raise ListingError(spec.label, f"no complete tool listing within {timeout:g} s (timeout)"
                                           f"{_tail(errlog)}") from None
        except Exception as exc:  # the SDK and its transports raise many kinds; each is named
            raise ListingError(spec.label, f"{_describe(exc)}{_tail(errlog)}") from None


async def _list(spec: ServerSpec, timeout: float, max_pages: int, errlog: Any) -> LiveListing:
    from mcp.client.stdio import StdioServerParameters, stdio_client

    async with contextlib.AsyncExitStack() as stack:
        if spec.url is not None:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            # a client of our own, to share the TLS context; its timeouts are the listing's, since
            # nothing in a listing waits longer than the listing's deadline
            try:
                verify = tls_context()
            except OSError as exc:     # a CA bundle named by $SSL_CERT_FILE that is missing or unreadable
                raise ListingError(spec.label, f"cannot load the CA certificates to verify the server: {exc}") from None
            http = await stack.enter_async_context(httpx2.AsyncClient(timeout=httpx2.Timeout(timeout), verify=verify))
            server: Any = streamable_http_client(spec.url, http_client=http)
        else:
            params = StdioServerParameters(command=spec.command[0], args=list(spec.command[1:]))
            server = stdio_client(params, errlog=errlog)
        return await _pages(spec, server, timeout, max_pages)


async def _pages(spec: ServerSpec, server: Any, timeout: float, max_pages: int) -> LiveListing:
    listing = LiveListing(spec)
    try:
        return await _read_pages(spec, server, timeout, max_pages, listing)
    except ListingError:
        raise
    except Exception:
        # the session's teardown (a streamable HTTP session's DELETE, the SDK's own wait for a stdio
        # server) runs after the last page; one that hangs or fails past the deadline leaves the
        # listing as complete as it was
        if listing.complete:
            return listing
        raise


async def _read_pages(spec: ServerSpec, server: Any, timeout: float, max_pages: int,
                      listing: LiveListing) -> LiveListing:
    import anyio
    from mcp import Client

    with anyio.fail_after(timeout):
        async with Client(server, mode="legacy", cache=None, read_timeout_seconds=timeout) as client:
            info = client.server_info
            if info is not None:
                listing.server_name, listing.server_version = info.name, info.version
            cursor: str | None = None
            given: dict[str, int] = {}
            while True:
                if len(listing.pages) >= max_pages:
                    raise ListingError(spec.label, f"more than {max_pages} pages of tools; stopped")
                result = await client.list_tools(cursor=cursor)
                page = result.model_dump(mode="json", by_alias=True, exclude_none=True)
                listing.pages.append(page)
                cursor = result.next_cursor or None
                if cursor is None:
                    listing.complete = True
                    return listing
                if cursor in given:
                    raise ListingError(spec.label, f"tools/list page {len(listing.pages)} names nextCursor "
                                                   f"{cursor!r}, already given by page {given[cursor]}: "
                                                   f"the listing cycles; stopped")
                given[cursor] = len(listing.pages)


_tls_lock = threading.Lock()
_tls: tuple[tuple[str | None, str | None], float, ssl.SSLContext] | None = None


def tls_context() -> ssl.SSLContext:
    """The TLS context streamable HTTP listings verify servers with: the one the SDK's HTTP client
    would make (`httpx2.create_ssl_context`: the system's CA certificates, or those named by
    $SSL_CERT_FILE or $SSL_CERT_DIR), made once and shared by every listing of the process. It is
    made again when either variable changes or after TLS_CONTEXT_MAX_AGE seconds. The lock makes
    listings that start together wait for one context rather than each load the bundle. It is the
    listings' own, not for other clients: the HTTP client sets the context's ALPN protocols on each
    connection, the same for every listing (HTTP/1.1), which another client might set otherwise."""
    import httpx2

    global _tls
    key = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    with _tls_lock:
        now = time.monotonic()
        if _tls is None or _tls[0] != key or now - _tls[1] > TLS_CONTEXT_MAX_AGE:
            _tls = (key, now, httpx2.create_ssl_context())
        return _tls[2]


def _describe(exc: BaseException) -> str:
    """One line for an error from the SDK, its transport or the process (a task group wraps them)."""
    from mcp.shared.exceptions import MCPError

    inner = exc
    while isinstance(inner, BaseExceptionGroup) and inner.exceptions:
        inner = inner.exceptions[0]
    if isinstance(inner, ListingError):
        return inner.message
    if isinstance(inner, MCPError):
        return f"the server answered an error (code {inner.code}): {inner.error.message}"
    if isinstance(inner, FileNotFoundError):
        return f"cannot start the server: {inner.filename or inner} not found"
    if isinstance(inner, OSError):
        return f"cannot reach the server: {inner.strerror or inner}"
    text = " ".join(str(inner).split())
    return f"{type(inner).__name__}: {text[:300]}" if text else type(inner).__name__


#: How much of the end of a server's standard error is read to quote its last lines.
TAIL_BYTES = 16384


def _tail(errlog: Any, lines: int = 3) -> str:
    """The last lines the server wrote on standard error, to say why it stopped."""
    try:
        errlog.flush()
        fd = errlog.fileno()
        # its last bytes only: a server may have written gigabytes there before it stopped
        size = os.fstat(fd).st_size
        end = os.pread(fd, TAIL_BYTES, max(0, size - TAIL_BYTES)).decode("utf-8", "replace")
        text = [line.rstrip() for line in end[-4000:].splitlines() if line.strip()]
    except (OSError, ValueError):
        return ""
    return f" (the server's standard error ends: {' | '.join(text[-lines:])})" if text else ""
