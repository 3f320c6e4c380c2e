"""`cancel_and_wait`: a stop is not held up by a task whose cancel was lost.

Python 3.11's `asyncio.wait_for` (inside redis-py's commands) returns a result that
arrived together with the cancel and drops the cancel; these tasks lose theirs the
same way, by catching it.
"""

from __future__ import annotations

import asyncio
import time

from gateway.shutdown import cancel_and_wait


async def test_a_task_that_lost_its_cancel_is_cancelled_again() -> None:
    lost = asyncio.Event()

    async def loses_its_first_cancel() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            lost.set()  # and goes on, as if a result had come
        await asyncio.sleep(60)

    running = asyncio.create_task(loses_its_first_cancel())
    await asyncio.sleep(0)
    left = await asyncio.wait_for(cancel_and_wait([running]), 10)
    assert lost.is_set() and running.cancelled() and left == set()


async def test_a_task_that_will_not_end_is_left_after_the_bound() -> None:
    released = asyncio.Event()

    async def holds_on() -> None:
        while not released.is_set():
            try:
                await released.wait()
            except asyncio.CancelledError:
                continue

    stubborn = asyncio.create_task(holds_on())
    ended = asyncio.create_task(asyncio.sleep(0))
    await asyncio.sleep(0)
    started = time.monotonic()
    left = await cancel_and_wait([stubborn, ended], within=0.5)
    assert left == {stubborn} and ended.done()
    assert time.monotonic() - started < 5
    released.set()
    await stubborn
