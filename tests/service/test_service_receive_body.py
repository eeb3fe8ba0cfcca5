"""Reading a request body (`app.receive_body`): 408 when the whole body has not arrived within the
body timeout; a cancellation from elsewhere stays a cancellation; a body read in time leaves no
deadline behind."""
from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("starlette")

from a3fast.service.app import receive_body  # noqa: E402
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
