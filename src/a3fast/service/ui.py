"""The live report at /ui: the page `a3fast report` writes, over the service's own trace so far.

The page is rendered on the server (the same `a3fast.report.render`, the same caps on what it
embeds), once per state of the trace: every request for an unchanged trace gets the cached page,
or a 304 to a browser that holds it. The page polls /ui/data — a few bytes: the trace's size — and
reloads itself when the trace has grown, so an idle page costs a tiny request per poll. A render
reads the whole trace (seconds for a long one), so on a busy service /ui/data keeps naming the page
already rendered until twice that render's time has passed: rendering takes at most a third of a
core however many browsers look, and a page is never more than three render times behind.
"""
from __future__ import annotations

import asyncio
import io
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..report import Limits, render
from ..report.policy import HTTP_HEADERS, HTTP_ONLY, policy_of, with_policy
from .state import ServiceState

__all__ = ["LiveReport", "POLL_SECONDS", "live_page", "page_headers"]

#: How often the page asks whether the trace has grown.
POLL_SECONDS = 3.0

_SCRIPT = r"""<script id="a3fast-live">
(function () {
  var version = %(version)s, every = %(every)d;
  function poll() {
    fetch(location.pathname.replace(/\/?$/, "/data"), {credentials: "same-origin", cache: "no-store"}).then(function (r) {
      return r.ok ? r.json() : null;
    }).then(function (d) {
      if (d && d.version !== version) { location.reload(); return; }
      setTimeout(poll, every);
    }, function () { setTimeout(poll, every); });
  }
  setTimeout(poll, every);
})();
</script>
"""


def live_page(html: str, version: int, poll: float = POLL_SECONDS) -> str:
    """The report page made live: a script reloads it when /ui/data says the trace has grown, and
    its policy allows that script (by its hash, like the page's own) and requests to its own origin.
    ValueError if the page is not the report's (a changed template must fail here, not serve a page
    that never updates)."""
    end = html.rfind("</body>")   # the last one: the bundled scripts' strings hold the text too
    if end < 0:
        raise ValueError("the report page no longer has the body end the live view edits")
    script = _SCRIPT % {"version": int(version), "every": int(poll * 1000)}
    return with_policy(html[:end] + script + html[end:], connect_self=True)


def page_headers(html: str) -> dict[str, str]:
    """The headers /ui sends with a page: its policy as a header too (a meta element cannot forbid
    framing), with `frame-ancestors 'none'`, and no content-type sniffing."""
    return {"Content-Security-Policy": f"{policy_of(html)}; {HTTP_ONLY}", **HTTP_HEADERS}


class _Upto(io.RawIOBase):
    """A file read up to a byte offset: the part of the trace the state has made durable."""

    def __init__(self, path: Path, end: int):
        self._fh = open(path, "rb")
        self._left = end

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self._left <= 0:
            return 0
        view = memoryview(buffer)[:self._left]
        n = self._fh.readinto(view)
        self._left -= n or 0
        return n or 0

    def close(self) -> None:
        self._fh.close()
        super().close()


@dataclass(frozen=True)
class Rendered:
    version: int
    html: bytes
    #: the headers to send with the page (`page_headers`)
    headers: dict[str, str]

    @property
    def etag(self) -> str:
        return f'"trace-{self.version}"'


class LiveReport:
    """The page for the trace's current size, rendered in a worker thread, one render at a time."""

    def __init__(self, state: ServiceState, limits: Limits = Limits(), poll: float = POLL_SECONDS,
                 spacing: float = 2.0):
        self.state = state
        self.limits = limits
        self.poll = poll
        #: how many render times pass, after a render, before the poll is told of a newer trace
        self.spacing = spacing
        self._page: Rendered | None = None
        self._fresh_until = 0.0
        self._lock = asyncio.Lock()

    async def version(self) -> int:
        """The trace's durable size in bytes: it grows with every record, so it names the page."""
        await self.state.durable()
        return self.state.trace_size

    async def shown_version(self) -> int:
        """The version the page should show now (what /ui/data answers): the trace's, unless the
        page rendered last is recent enough to keep (module doc)."""
        version = await self.version()
        page = self._page
        if page is not None and page.version != version and time.monotonic() < self._fresh_until:
            return page.version
        return version

    async def page(self) -> Rendered:
        version = await self.version()
        async with self._lock:
            if self._page is None or self._page.version != version:
                started = time.monotonic()
                html = await asyncio.get_running_loop().run_in_executor(None, self._render, version)
                finished = time.monotonic()
                self._page = Rendered(version, html, page_headers(html.decode("utf-8")))
                self._fresh_until = finished + self.spacing * (finished - started)
            return self._page

    def _render(self, version: int) -> bytes:
        path = self.state.trace_path
        if version == 0 or not os.path.exists(path):
            html = render([], name="a3fast serve", limits=self.limits)
        else:
            with io.BufferedReader(_Upto(path, version)) as trace:
                html = render(trace, name="a3fast serve", limits=self.limits)
        return live_page(html, version, self.poll).encode("utf-8")
