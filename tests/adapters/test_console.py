"""The console's approval prompt: printed with `approve? [y/n]`, answered by the next y/n line."""

from __future__ import annotations

import asyncio
import io
import os
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis

from adapters import console
from gateway.approvals import Status
from gateway.ingest import Ingest
from gateway.model import Address
from gateway.store import Keys
from tests.gateway.helpers import settings

ADDRESS = Address(platform="console", workspace="local", channel="console")


async def _until(condition: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not await condition():
            await asyncio.sleep(0.01)


async def _typed(ingest: Ingest, text: str) -> asyncio.Task[None]:
    """`console.run` reading `text` from a pipe, as if typed."""
    read, write = os.pipe()
    os.write(write, text.encode())
    os.close(write)
    task = asyncio.create_task(console.run(ingest, stdin=read))
    task.add_done_callback(lambda _: os.close(read))
    return task


async def _open(ingest: Ingest) -> str:
    return await ingest.approvals.open(
        console.SESSION_KEY, "0.0", "c1", "files__delete", "{}", console.USER_ID, ADDRESS, 600
    )


async def test_the_prompt_shows_the_request_and_asks_for_y_or_n() -> None:
    out = io.StringIO()
    sender = console.ConsoleSender(out)
    message_id = await sender.ask_approval(ADDRESS, "Run `files__delete`?", "a" * 16)
    await sender.settle_approval(ADDRESS, message_id, "Declined.")
    assert out.getvalue() == "bot: Run `files__delete`?\napprove? [y/n]\nbot: Declined.\n"


def test_yes_and_no_in_any_case_are_answers_and_nothing_else_is() -> None:
    assert [console.answer(w) for w in ("y", " YES ", "n", "No")] == [True, True, False, False]
    assert [console.answer(w) for w in ("yes please", "", "ok")] == [None, None, None]


async def test_a_y_line_approves_the_pending_request_and_the_next_line_is_a_message(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest = Ingest(settings(redis_url), redis_client)
    approval_id = await _open(ingest)
    task = await _typed(ingest, "y\nthanks\n")

    async def settled() -> bool:
        approval = await ingest.approvals.by_id(console.SESSION_KEY, approval_id)
        inbox = await ingest.sessions.inbox(console.SESSION_KEY)
        return approval is not None and approval.status == Status.APPROVED and len(inbox) == 1

    await _until(settled)
    task.cancel()
    inbox = await ingest.sessions.inbox(console.SESSION_KEY)
    assert [entry["text"] for entry in inbox] == ["thanks"]
    jobs = await redis_client.xrange(Keys.jobs("console"))
    assert [fields["kind"] for _, fields in jobs] == ["turn"]  # one, shared by both


async def test_without_a_pending_request_y_is_a_message(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest = Ingest(settings(redis_url), redis_client)
    task = await _typed(ingest, "n\n")

    async def received() -> bool:
        return len(await ingest.sessions.inbox(console.SESSION_KEY)) == 1

    await _until(received)
    task.cancel()
