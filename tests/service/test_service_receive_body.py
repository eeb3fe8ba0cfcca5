"""Reading a request body (`app.receive_body`): 408 when the whole body has not arrived within the
body timeout; a cancellation from elsewhere stays a cancellation; a body read in time leaves no
deadline behind. The deadlines of one loop share one timer (`app._Deadlines`): each still fires at
its own time, and a stream of reads does not set the timer once a read."""
from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("starlette")

from a3fast.service.app import _Deadlines, receive_body  # noqa: E402
from a3fast.service.problems import ServiceError  # noqa: E402

SCOPE = {"type": "http", "headers": [(b"content-length", b"10")]}


def _slow_receive(first: bytes):
    """The first part of a body at once, the rest never."""
    parts = [{"type": "http.request", "body": first, "more_body": True}]

    async def receive():
        if parts:
            return parts.pop()
        await asyncio.sleep(3600)
    return receive


def test_a_body_not_whole_within_the_body_timeout_is_408():
    async def read():
        return await receive_body(SCOPE, _slow_receive(b"12345"), 100, 0.05)
    with pytest.raises(ServiceError) as refused:
        asyncio.run(read())
    assert refused.value.status == 408 and refused.value.problems[0]["found"] == "5 bytes"


def test_a_cancellation_from_elsewhere_while_reading_a_body_stays_a_cancellation():
    async def go():
        task = asyncio.ensure_future(receive_body(SCOPE, _slow_receive(b"12345"), 100, 60.0))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    asyncio.run(go())


def test_a_body_read_in_time_leaves_no_deadline_behind():
    async def go():
        async def receive():
            return {"type": "http.request", "body": b"0123456789", "more_body": False}
        body = await receive_body(SCOPE, receive, 100, 0.02)
        await asyncio.sleep(0.1)         # past the body timeout: the task is not cancelled
        return body
    assert asyncio.run(go()) == b"0123456789"


def test_a_body_over_the_limit_is_413_before_it_is_read():
    async def receive():
        raise AssertionError("not read")
    with pytest.raises(ServiceError) as refused:
        asyncio.run(receive_body(SCOPE, receive, 5, 1.0))
    assert refused.value.status == 413


def _stalled_reads(timeouts: list[float]) -> tuple[list[tuple[int, float, float]], _Deadlines]:
    """Reads of bodies that never finish, started together in this order on one loop, each with its
    timeout: (status, timeout, seconds until refused) of each, and the loop's deadline watch."""
    async def go():
        loop = asyncio.get_running_loop()
        started = loop.time()

        async def read(timeout: float):
            try:
                await receive_body(SCOPE, _slow_receive(b"123"), 100, timeout)
            except ServiceError as refused:
                return refused.status, timeout, loop.time() - started
        return await asyncio.gather(*(read(t) for t in timeouts)), _Deadlines.of(loop)
    return asyncio.run(go())


def test_deadlines_of_one_loop_fire_each_at_its_own_time():
    # started in this order; the second moves the timer earlier
    answers, watch = _stalled_reads([0.45, 0.15, 0.3, 0.15])
    for status, timeout, elapsed in answers:
        assert status == 408 and timeout - 0.002 <= elapsed < timeout + 0.12, (timeout, elapsed)
    assert not watch.pending() and not watch.timers      # nothing left to watch, no timer left set


def test_a_stream_of_reads_in_time_sets_the_timer_once():
    async def go():
        async def receive():
            await asyncio.sleep(0)      # the read suspends, as a socket's does
            return {"type": "http.request", "body": b"0123456789", "more_body": False}
        watch = _Deadlines.of(asyncio.get_running_loop())
        await receive_body(SCOPE, receive, 100, 60.0)
        timers = list(watch.timers)
        for _ in range(200):
            assert await receive_body(SCOPE, receive, 100, 60.0) == b"0123456789"
        return watch, timers
    watch, timers = asyncio.run(go())
    assert len(timers) == 1 and watch.timers == timers and not watch.pending()


def test_a_cancelled_deadline_never_fires_and_a_later_one_still_does():
    async def go():
        loop = asyncio.get_running_loop()
        early = asyncio.ensure_future(receive_body(SCOPE, _slow_receive(b"1"), 100, 0.05))
        late = asyncio.ensure_future(receive_body(SCOPE, _slow_receive(b"12"), 100, 0.2))
        await asyncio.sleep(0.01)
        early.cancel()                   # cancelled from elsewhere before its deadline
        with pytest.raises(asyncio.CancelledError):
            await early
        with pytest.raises(ServiceError) as refused:
            await late
        return refused.value, _Deadlines.of(loop)
    refused, watch = asyncio.run(go())
    assert refused.status == 408 and refused.problems[0]["found"] == "2 bytes" and not watch.pending()


def test_a_loop_that_read_bodies_is_freed_with_what_its_reads_held():
    import gc
    import weakref

    async def go():
        async def receive():
            return {"type": "http.request", "body": b"0123456789", "more_body": False}
        await receive_body(SCOPE, receive, 100, 60.0)
        stalled = asyncio.ensure_future(receive_body(SCOPE, _slow_receive(b"x" * 9), 100, 60.0))
        await asyncio.sleep(0.01)
        return weakref.ref(asyncio.get_running_loop()), weakref.ref(stalled)

    loop = asyncio.new_event_loop()
    # the pending read's task is destroyed with its loop, which asyncio reports: expected here
    loop.set_exception_handler(lambda _loop, _context: None)
    try:
        loop_ref, stalled_ref = loop.run_until_complete(go())
    finally:
        loop.close()        # closed with a read still pending, never cancelled
    del loop
    gc.collect()
    # the watch holds its loop weakly: neither the loop nor the pending read's task outlives it
    assert loop_ref() is None and stalled_ref() is None


def test_many_stalled_bodies_of_two_timeouts_are_each_refused_in_time():
    answers, watch = _stalled_reads([0.3, 0.1] * 150)
    for status, timeout, elapsed in answers:
        assert status == 408 and timeout - 0.002 <= elapsed < timeout + 0.15, (timeout, elapsed)
    assert not watch.pending() and not watch.timers
