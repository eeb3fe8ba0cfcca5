"""The watch's stop waits, for a bounded time, for the MCP listings still running on their threads.

A listing runs on a daemon thread of its own and can be in OpenSSL without the GIL (building the
TLS context the listings share, loading the CA bundle, or in a handshake). A `serve` process that
exited under such a thread died of SIGSEGV now and then: OpenSSL's exit handlers freed what the
thread was reading.
The real Watcher runs here in-process, its listing function replaced by one that takes its time
(or never ends), so the stop's wait is seen without racing OpenSSL itself."""
from __future__ import annotations

import asyncio
import threading
import time

import pytest

pytest.importorskip("httpx")

from a3fast.interop import mcp_live  # noqa: E402
from a3fast.service import watch  # noqa: E402
from a3fast.service.operations import Operations  # noqa: E402
from a3fast.service.state import ServiceState  # noqa: E402
from a3fast.service.watch import WatchConfig, Watcher  # noqa: E402


def _stopped_during_a_listing(tmp_path, monkeypatch, listing) -> tuple[float, Watcher]:
    """Run a watch of one MCP server whose listing is `listing`, stop it once the listing has
    started, and return how long the stop took."""
    started = threading.Event()

    def list_tools(*args, **kwargs):
        started.set()
        return listing()

    monkeypatch.setattr(mcp_live, "list_tools", list_tools)
    state = ServiceState(tmp_path / "state")
    state.open()
    watcher = Watcher(Operations(state), WatchConfig(servers=(("ops", "http://127.0.0.1:9/mcp"),), interval=0.05))

    async def stop_during_the_listing() -> float:
        task = asyncio.create_task(watcher.run())
        while not started.is_set():
            await asyncio.sleep(0.01)
        stopping = time.monotonic()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return time.monotonic() - stopping

    try:
        return asyncio.run(stop_during_the_listing()), watcher
    finally:
        state.close()


def test_the_watch_stop_waits_for_a_listing_under_way_to_end(tmp_path, monkeypatch):
    ended = threading.Event()

    def slow_listing():
        time.sleep(0.4)
        ended.set()
        raise mcp_live.ListingError("http://127.0.0.1:9/mcp", "no server here")

    took, watcher = _stopped_during_a_listing(tmp_path, monkeypatch, slow_listing)
    assert ended.is_set(), "the stop returned while a listing was still under way"
    assert not watcher._listings and took < watch.LISTINGS_STOP_WAIT


def test_the_watch_stop_leaves_a_stuck_listing_once_its_wait_is_over(tmp_path, monkeypatch):
    monkeypatch.setattr(watch, "LISTINGS_STOP_WAIT", 0.3)
    release = threading.Event()
    try:
        took, watcher = _stopped_during_a_listing(tmp_path, monkeypatch, release.wait)
        assert 0.25 <= took < 5, took
        assert len(watcher._listings) == 1      # still running, left behind as a daemon thread
    finally:
        release.set()


def test_a_listing_thread_leaves_the_set_when_it_ends_however_it_ends():
    threads: set[threading.Thread] = set()

    def failing():
        raise mcp_live.ListingError("http://127.0.0.1:9/mcp", "refused")

    async def both() -> None:
        assert await watch._in_daemon_thread(threads, lambda: 7) == 7
        with pytest.raises(mcp_live.ListingError):
            await watch._in_daemon_thread(threads, failing)

    asyncio.run(both())
    deadline = time.monotonic() + 5
    while threads and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not threads
