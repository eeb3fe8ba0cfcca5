"""Fetching Agent Cards from the agents themselves, over HTTP(S), within bounds.

An agent publishes its card at a well-known path under its URL: `/.well-known/agent-card.json`
(A2A 0.3 and later), or `/.well-known/agent.json` before that; the legacy path is tried only when
the current one is not there (404). A URL whose path already ends in `.json` is the card itself.

Agents on the network are hostile input, so every fetch is bounded: a timeout per network operation
and one deadline for the whole fetch, connect, response head and body of every location and
redirect together (a server that drips one byte a second, even inside its status line or headers,
does not hold an import hostage), every error of the HTTP client turned into a `FetchError` (a
redirect to `javascript:` included), a size limit enforced while streaming (reading stops past it), a limited number of
redirects followed by hand (a loop is named as one, and an https URL is never redirected to plain
http), TLS certificates verified. An `EtagCache` remembers each card's ETag and body, so a refresh
sends If-None-Match and a 304 costs no body.

A user name and password in a URL (`https://user:secret@host/`) are used to fetch, and never shown:
every message, report line, metric and declaration carries the URL without them
(`without_credentials`). An agent's endpoint as a declaration carries it is an absolute http(s) URL
with a host and no credentials (`endpoint_problem`): a declaration goes into every record of the
placements made on it.
"""
from __future__ import annotations

import base64
import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, urljoin, urlsplit, urlunsplit

import orjson

from ..files import write_atomic

__all__ = ["WELL_KNOWN", "Limits", "FetchError", "FetchedCard", "EtagCache", "card_locations", "http_url",
           "without_credentials", "endpoint_problem", "fetch_card", "fetch_card_async", "new_client"]

#: Where an agent serves its card, in the order tried (current, then legacy).
WELL_KNOWN = ("/.well-known/agent-card.json", "/.well-known/agent.json")
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


@dataclass(frozen=True)
class Limits:
    """Bounds on one card's fetch: seconds per network operation (connect, each read), seconds for
    the whole fetch (connect, head and body of every location and redirect), bytes of body, and
    redirects followed."""

    timeout: float = 10.0
    deadline: float = 30.0
    max_bytes: int = 1_048_576
    max_redirects: int = 5


class FetchError(Exception):
    """A card that could not be fetched: `url` is where, `message` says what went wrong. `gone` is
    True when the server says there is no card (404 at every location, or 410): an answer about the
    card, unlike an error on the way to it."""

    def __init__(self, url: str, message: str, gone: bool = False):
        url, message = without_credentials(url), without_credentials(message)
        super().__init__(f"{url}: {message}")
        self.url = url
        self.message = message
        self.gone = gone


@dataclass(frozen=True)
class FetchedCard:
    """A card's bytes and where they came from. `url` is the card's final URL (after redirects);
    `revalidated` is True when the server answered 304 and the body is the cached one."""

    requested: str
    url: str
    body: bytes
    etag: str | None
    revalidated: bool = False


class EtagCache:
    """A small JSON file: card URL -> {etag, body}. Read whole, written whole by atomic replace, so
    a crash never leaves half a cache; an unreadable or foreign file is treated as empty."""

    def __init__(self, path: str | os.PathLike[str] | None):
        self.path = Path(path) if path is not None else None
        self._entries: dict[str, dict[str, str]] = {}
        self._changed = False
        if self.path is not None and self.path.is_file():
            try:
                data = orjson.loads(self.path.read_bytes())
            except (OSError, orjson.JSONDecodeError):
                data = None
            if isinstance(data, dict):
                self._entries = {url: entry for url, entry in data.items()
                                 if isinstance(entry, dict) and isinstance(entry.get("etag"), str)
                                 and isinstance(entry.get("body"), str)}

    def get(self, url: str) -> tuple[str, bytes] | None:
        entry = self._entries.get(url)
        if entry is None:
            return None
        try:
            return entry["etag"], base64.b64decode(entry["body"], validate=True)
        except ValueError:
            return None

    def put(self, url: str, etag: str, body: bytes) -> None:
        self._entries[url] = {"etag": etag, "body": base64.b64encode(body).decode("ascii")}
        self._changed = True

    def save(self) -> None:
        if self.path is None or not self._changed:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, orjson.dumps(self._entries, option=orjson.OPT_SORT_KEYS))
        self._changed = False


#: what urlsplit strips from the start of a URL before reading its scheme
#: what follows "host:" when a URL is a host and port with no scheme ("localhost:8080/a")
_PORT_FIRST = re.compile(r"[0-9]*(?:[/?#]|$)")


#: the user name and password of a URL, as written in a text: after "://", up to the last "@"
#: before the path (no "/" or space before it; a password with a raw "?" or "#", which no URL
#: reader takes as one, is still left out of a message that quotes it)
_CREDENTIALS = re.compile(r"(?<=://)[^\s/]*@")


def without_credentials(text: str, mark: str = "") -> str:
    """`text` (a URL, or a message that quotes URLs) with the user name and password of each URL
    replaced by `mark`: `https://user:secret@host/a` -> `https://host/a` (or `https://…@host/a`
    with the mark `…@`, where a message says that they were there)."""
    return _CREDENTIALS.sub(mark, text) if "@" in text else text


def http_url(url: str) -> SplitResult:
    """The parts of an http:// or https:// URL with a host (and a port, if any, that is one), else
    ValueError saying what is wrong (its words complete "expected an http:// or https:// URL: ..."):
    an unbalanced IPv6 bracket, a port past 65535, no host, a space or a control character (which
    a URL never holds: Python's reader drops a newline or tab silently) is no URL a client can reach."""
    odd = next((ch for ch in url if ch.isspace() or unicodedata.category(ch) == "Cc"), None)
    if odd is not None:
        raise ValueError(f"it holds {odd!r} (a URL holds no space or control character; write one as %XX)")
    try:
        parts = urlsplit(url)
    except ValueError as exc:     # a bracket left open, no address in brackets, or a host NFKC changes
        raise ValueError("its IPv6 address has an unbalanced bracket" if str(exc) == "Invalid IPv6 URL" else
                         f"it cannot be read: {exc}") from None
    if parts.scheme not in ("http", "https"):
        # "localhost:8080" reads as the scheme "localhost": a host and port, with no scheme at all
        # ("javascript:alert(1)" has one)
        rest = url[len(parts.scheme) + 1:]
        if not parts.scheme or (not rest.startswith("//") and _PORT_FIRST.match(rest)):
            raise ValueError("it has no scheme (write http:// or https:// before the host)")
        raise ValueError(f"its scheme is {parts.scheme!r}")
    host_port = parts.netloc.rpartition("@")[2]
    if not host_port.startswith("[") and host_port.count(":") > 1:
        raise ValueError(f"its host and port {host_port!r} hold more than one ':' (an IPv6 address goes "
                         f"in brackets: http://[::1]:8080/)")
    try:
        parts.port
    except ValueError:
        port = host_port.rpartition("]")[2][1:] if host_port.startswith("[") else host_port.partition(":")[2]
        raise ValueError(f"its port {port!r} is no number from 0 to 65535") from None
    if not parts.hostname or not parts.hostname.strip():
        raise ValueError("it names no host")
    return parts


def endpoint_problem(url: str) -> str | None:
    """Why `url` cannot be an agent's endpoint as a declaration carries it, or None when it can: an
    absolute http:// or https:// URL with a host (`http_url`) and no user name or password."""
    try:
        parts = http_url(url)
    except ValueError as exc:
        return str(exc)
    if "@" in parts.netloc:
        return ("it holds a user name or password (they go with the connection: a declaration goes "
                "into every record of a placement on its agent)")
    return None


def card_locations(url: str) -> list[str]:
    """The URLs to try for the card of the agent at `url`, in order."""
    try:
        parts = http_url(url)
    except ValueError as exc:
        raise FetchError(url, f"expected an http:// or https:// URL of an agent (or of its card): {exc}") from None
    if parts.path.lower().endswith(".json"):
        return [urlunsplit(parts._replace(fragment=""))]
    base = parts.path.rstrip("/")
    return [urlunsplit((parts.scheme, parts.netloc, base + path, "", "")) for path in WELL_KNOWN]


def fetch_card(url: str, limits: Limits = Limits(), cache: EtagCache | None = None) -> FetchedCard:
    """The card of the agent at `url` (see the module doc), or FetchError saying why not. Runs its
    own event loop (in a worker thread when this thread already runs one, as a notebook does); a
    coroutine can await `fetch_card_async` instead."""
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(fetch_card_async(url, limits, cache))
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as worker:
        return worker.submit(lambda: asyncio.run(fetch_card_async(url, limits, cache))).result()


async def fetch_card_async(url: str, limits: Limits = Limits(), cache: EtagCache | None = None,
                           client: Any = None) -> FetchedCard:
    """`fetch_card` for a running event loop; `client` is an `httpx.AsyncClient` to share a
    connection pool (made by `new_client`), else one is made for this fetch.

    `limits.deadline` bounds the whole fetch, every location and redirect, connect, response head
    and body together: the per-read timeout alone restarts with every byte, so a server dripping a
    header byte at a time would otherwise hold the fetch for as long as it likes."""
    from ..cancellation import within

    locations = card_locations(url)
    own = client is None
    if own:
        client = new_client(limits)
    at = [locations[0]]   # the URL being fetched, named if the deadline cuts the fetch off
    try:
        return await within(_fetch(client, url, locations, limits, cache, at), limits.deadline)
    except TimeoutError:
        raise FetchError(url, f"{at[0]}: no complete card within {limits.deadline:g} s (deadline for "
                              f"connect, response head and body together); stopped") from None
    finally:
        if own:
            await client.aclose()


def new_client(limits: Limits = Limits()) -> Any:
    """An `httpx.AsyncClient` as card fetches use it: verified TLS, no automatic redirects (they
    are followed by hand, within the limits), a timeout per network operation."""
    import httpx

    return httpx.AsyncClient(timeout=httpx.Timeout(limits.timeout), verify=True, follow_redirects=False,
                             headers={"Accept": "application/json", "Accept-Encoding": "gzip, deflate"})


async def _fetch(client: Any, url: str, locations: list[str], limits: Limits, cache: EtagCache | None,
                 at: list[str]) -> FetchedCard:
    missing = []
    for location in locations:
        fetched = await _get(client, url, location, limits, cache, at)
        if fetched is not None:
            return fetched
        missing.append(location)
    raise FetchError(url, "no Agent Card: " + " and ".join(f"{m} answered 404" for m in missing), gone=True)


async def _get(client: Any, requested: str, location: str, limits: Limits,
               cache: EtagCache | None, at: list[str]) -> FetchedCard | None:
    """One card location with its redirects; None when the server says it is not there (404)."""
    import httpx

    cached = cache.get(location) if cache is not None else None
    seen = [location]
    current = location
    while True:
        at[0] = current
        # the condition goes to the location the cached card is kept for, and only there
        asked = cached is not None and current == location and _sendable(cached[0])
        headers = {"If-None-Match": cached[0]} if asked and cached is not None else {}
        try:
            async with client.stream("GET", current, headers=headers) as response:
                status = response.status_code
                if status in _REDIRECTS and "location" in response.headers:
                    target = urljoin(current, response.headers["location"])
                    target = _check_redirect(requested, current, target, seen, limits)
                    seen.append(target)
                    current = target
                    continue
                if status == 304 and asked:     # elsewhere a 304 answers no question: an error below
                    assert cached is not None
                    return FetchedCard(requested, current, cached[1], cached[0], revalidated=True)
                if status == 404:
                    return None
                if status != 200:
                    raise FetchError(requested, f"{current} answered HTTP {status} "
                                                f"{response.reason_phrase}".rstrip(), gone=status == 410)
                body = await _read_body(response, requested, current, limits)
                etag = response.headers.get("etag")
        except FetchError:
            raise
        except httpx.TimeoutException:
            raise FetchError(requested, f"{current}: no answer within {limits.timeout:g} s "
                                        f"(timeout)") from None
        except Exception as exc:
            # The client raises more than httpx.HTTPError: InvalidURL for a Location it cannot
            # parse (javascript:, mailto:, data:), ssl and socket errors, decoding errors. Every one
            # is an error on the way to the card, never the caller's crash.
            raise FetchError(requested, f"{current}: {_describe(exc)}") from None
        if cache is not None and etag and _sendable(etag):
            cache.put(location, etag, body)
        return FetchedCard(requested, current, body, etag)


def _sendable(etag: str) -> bool:
    """Whether an ETag can go back in an If-None-Match header: printable ASCII (a header value the
    client encodes; one it cannot would fail every later fetch of the card)."""
    return etag.isascii() and etag.isprintable()


def _check_redirect(requested: str, current: str, target: str, seen: list[str], limits: Limits) -> str:
    """The redirect's target to follow, or FetchError saying why it is not followed."""
    if urlsplit(target).scheme not in ("http", "https"):
        raise FetchError(requested, f"{current} redirects to {target!r}, which is not http(s)")
    if " " in target:       # a lenient server's unescaped space, followed as a browser follows it
        target = target.replace(" ", "%20")
    try:        # held to what the first URL is held to: a port past 65535, no host
        http_url(target)
    except ValueError as exc:
        raise FetchError(requested, f"{current} redirects to {target!r}, which is no URL to follow: {exc}") from None
    if urlsplit(current).scheme == "https" and urlsplit(target).scheme == "http":
        raise FetchError(requested, f"{current} redirects to {target}: an https URL is never "
                                    f"followed to plain http")
    if target in seen:
        raise FetchError(requested, f"redirect loop: {' -> '.join(seen + [target])}")
    if len(seen) > limits.max_redirects:
        raise FetchError(requested, f"more than {limits.max_redirects} redirects "
                                    f"({' -> '.join(seen)} -> ...)")
    return target


async def _read_body(response: Any, requested: str, current: str, limits: Limits) -> bytes:
    length = response.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limits.max_bytes:
        raise FetchError(requested, f"{current}: the card is {int(length)} bytes, over the limit of "
                                    f"{limits.max_bytes} (Content-Length); not read")
    chunks, size = [], 0
    async for chunk in response.aiter_raw():
        size += len(chunk)
        if size > limits.max_bytes:
            raise FetchError(requested, f"{current}: the card is over the limit of {limits.max_bytes} "
                                        f"bytes; reading stopped there")
        chunks.append(chunk)
    encoding = response.headers.get("content-encoding", "identity").lower()
    body = b"".join(chunks)
    if encoding not in ("identity", ""):
        # Decoded here, after the limit was applied to the bytes on the wire, and bounded again:
        # a small compressed body can expand without limit.
        body = _decompress(body, encoding, requested, current, limits)
    return body


def _decompress(body: bytes, encoding: str, requested: str, current: str, limits: Limits) -> bytes:
    import zlib

    if encoding not in ("gzip", "deflate"):
        raise FetchError(requested, f"{current}: Content-Encoding {encoding!r} is not read "
                                    f"(gzip, deflate or none)")
    wbits = 31 if encoding == "gzip" else 15
    decoder = zlib.decompressobj(wbits)
    try:
        out = decoder.decompress(body, limits.max_bytes + 1)
    except zlib.error as exc:
        raise FetchError(requested, f"{current}: the {encoding} body does not decode ({exc})") from None
    if len(out) > limits.max_bytes:
        raise FetchError(requested, f"{current}: the card decompresses to over the limit of "
                                    f"{limits.max_bytes} bytes; reading stopped there")
    return out


def _describe(exc: Exception) -> str:
    import httpx

    text = " ".join(str(exc).split())[:300]
    if "CERTIFICATE_VERIFY_FAILED" in text or "SSL" in text or "TLS" in text:
        return f"TLS failed ({text or type(exc).__name__})"
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect ({text or 'connection refused'})"
    if isinstance(exc, httpx.InvalidURL):
        return f"a URL the client cannot follow ({text}); not fetched"
    if isinstance(exc, (httpx.ReadError, httpx.WriteError, ConnectionError)):
        return f"the connection failed ({text or type(exc).__name__})"
    if isinstance(exc, httpx.RemoteProtocolError):
        return f"not a valid HTTP answer ({text or type(exc).__name__})"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
