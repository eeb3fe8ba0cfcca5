"""Waits that never lose a stop.

`asyncio.wait_for` before Python 3.12 swallows a cancellation that arrives in the same turn of the
loop as the result it waits for: it returns the result, and the task goes on as if never cancelled
(CPython gh-86296). A watch task that cancellation was meant to end then kept checking its sources,
so the service's stop, which waits for the task, never finished. `within` is the deadline the
watches use instead, and `cancel_until_done` is how the service ends its background tasks: it asks
again until each has ended, so a cancellation lost anywhere else (a library's own wait) delays the
stop by one `every` and no more. `join_within` is how a stop waits, for a bounded time, for the
daemon threads a watch started: a thread inside a native library (OpenSSL building a TLS
context, say) when the interpreter exits can crash the process, since the library's exit handlers
free what it is reading.
"""
from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Iterable
from typing import Any, TypeVar

__all__ = ["within", "cancel_until_done", "join_within", "CLEAN_UP_SECONDS"]

T = TypeVar("T")


#: How long a cancelled caller of `within` waits for the awaitable's own clean-up (a response
#: closed, a connection returned) before it goes on being cancelled without it.
CLEAN_UP_SECONDS = 1.0


async def within(awaitable: Awaitable[T], seconds: float) -> T:
    """The result of `awaitable`, or TimeoutError after `seconds` (the awaitable is then cancelled).
    A cancellation of the caller is always raised, even when the awaitable finished in the same
    turn; the awaitable is cancelled too, and its clean-up given up to CLEAN_UP_SECONDS first."""
    task = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait((task,), timeout=seconds)
    except asyncio.CancelledError:
        task.cancel()
        task.add_done_callback(_retrieved)   # how it ends is no one's to report: its caller stopped
        await asyncio.wait((task,), timeout=CLEAN_UP_SECONDS)
        raise
    if not done:
        task.cancel()
        # the awaitable's own clean-up runs before the caller hears of the deadline, as with
        # wait_for; a cancellation of the caller during it ends this wait (and is raised)
        await asyncio.wait((task,))
        raise TimeoutError(f"not done within {seconds:g} s")
    return task.result()


async def cancel_until_done(tasks: Iterable[asyncio.Future[Any]], every: float = 1.0) -> None:
    """Cancel each of `tasks` and wait until all have ended, cancelling those still running again
    every `every` seconds. Their results and exceptions are left on them (not raised here)."""
    tasks = list(tasks)
    pending = {task for task in tasks if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=every)
    for task in tasks:
        if task.done() and not task.cancelled():
            task.exception()   # retrieved: an ended task's error is not reported again at exit


def _retrieved(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


async def join_within(threads: Iterable[threading.Thread], seconds: float) -> None:
    """Wait up to `seconds` in all for `threads` to end, on a worker thread (the loop goes on); a
    thread still running then is left."""
    running = [thread for thread in threads if thread.is_alive()]
    if running:
        await asyncio.to_thread(_join_all, running, time.monotonic() + seconds)


def _join_all(threads: list[threading.Thread], until: float) -> None:
    for thread in threads:
        thread.join(max(0.0, until - time.monotonic()))
