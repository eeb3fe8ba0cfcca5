"""a3fast.cancellation: a stop asked of a watch is never lost (docs/design.md, "Stopping the
service"). The race is made exact: the awaited result and the cancellation land in one turn of the
loop, which is how the watch tasks came to outlive the service's stop."""
from __future__ import annotations

import asyncio

import pytest

from a3fast.cancellation import cancel_until_done, within


def _result_and_cancel_in_one_turn(wait):
    """Run `wait(future)` in a task; once it waits, set the future's result and cancel the task in
    the same callback. Returns how the task ended: ("result", value) or ("cancelled", None)."""
    async def scenario():
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        task = asyncio.create_task(wait(future))
        await asyncio.sleep(0)          # the task is now waiting
        await asyncio.sleep(0)

        def both() -> None:
            future.set_result("fetched")
            task.cancel()
        loop.call_soon(both)
        try:
            return "result", await task
        except asyncio.CancelledError:
            return "cancelled", None
    return asyncio.run(scenario())


def test_within_raises_a_cancellation_that_arrives_with_the_result():
    assert _result_and_cancel_in_one_turn(lambda f: within(f, 10)) == ("cancelled", None)


def test_within_returns_the_result_in_time():
    async def scenario():
        async def fetched():
            await asyncio.sleep(0.01)
            return 7
        return await within(fetched(), 5)
    assert asyncio.run(scenario()) == 7


def test_within_cancels_the_awaitable_at_the_deadline_and_raises_timeout_error():
    ended = []

    async def scenario():
        async def slow():
            try:
                await asyncio.sleep(60)
            finally:
                ended.append("cleaned up")
        with pytest.raises(TimeoutError):
            await within(slow(), 0.05)
    asyncio.run(scenario())
    assert ended == ["cleaned up"]   # its clean-up ran before the deadline was reported


def test_within_raises_the_awaitables_own_error():
    async def scenario():
        async def broken():
            raise ValueError("no card")
        with pytest.raises(ValueError, match="no card"):
            await within(broken(), 5)
    asyncio.run(scenario())


def test_cancel_until_done_ends_a_task_that_swallowed_one_cancellation():
    async def scenario():
        swallowed = []

        async def stubborn():
            while True:
                try:
                    await asyncio.sleep(0.01)
                except asyncio.CancelledError:
                    if swallowed:
                        raise
                    swallowed.append(1)   # as a wait that returned its result instead

        task = asyncio.create_task(stubborn())
        await asyncio.sleep(0.02)
        await asyncio.wait_for(cancel_until_done([task], every=0.05), 5)
        return task.cancelled(), swallowed
    assert asyncio.run(scenario()) == (True, [1])


def test_cancel_until_done_leaves_errors_on_the_tasks_and_takes_ended_ones():
    async def scenario():
        async def failing():
            raise RuntimeError("watch broke")
        failed = asyncio.create_task(failing())
        waiting = asyncio.create_task(asyncio.sleep(60))
        await asyncio.sleep(0)
        await cancel_until_done(task for task in (failed, waiting))   # any iterable, once
        return isinstance(failed.exception(), RuntimeError), waiting.cancelled()
    assert asyncio.run(scenario()) == (True, True)


def test_a_cancelled_caller_gives_the_awaitables_clean_up_its_moment_first():
    steps = []

    async def scenario():
        async def fetching():
            try:
                await asyncio.sleep(60)
            finally:
                await asyncio.sleep(0.02)     # closing a response takes a turn or two
                steps.append("closed")

        caller = asyncio.create_task(within(fetching(), 10))
        await asyncio.sleep(0.01)
        caller.cancel()
        try:
            await caller
        except asyncio.CancelledError:
            steps.append("caller cancelled")
    asyncio.run(scenario())
    assert steps == ["closed", "caller cancelled"]


def test_an_awaitable_that_will_not_end_holds_a_cancelled_caller_no_longer_than_its_moment(monkeypatch):
    import a3fast.cancellation as cancellation
    monkeypatch.setattr(cancellation, "CLEAN_UP_SECONDS", 0.05)

    async def scenario():
        released = asyncio.Event()

        async def stubborn():
            while not released.is_set():
                try:
                    await released.wait()
                except asyncio.CancelledError:
                    pass              # swallowed, every time, until released

        caller = asyncio.create_task(within(stubborn(), 10))
        await asyncio.sleep(0.01)
        caller.cancel()
        done, _ = await asyncio.wait((caller,), timeout=5)
        released.set()                # so that the loop can close
        return bool(done) and caller.cancelled()
    assert asyncio.run(scenario())
