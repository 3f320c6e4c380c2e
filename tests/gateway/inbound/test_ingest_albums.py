"""Albums: items that arrive as messages of their own, sharing a media group, are
gathered into one user message, and the turn waits while they are arriving."""

from __future__ import annotations

import asyncio
import time

import redis.asyncio as aioredis

from gateway.inbound.ingest import Ingest, Receipt
from gateway.messages import Attachment, Inbound
from gateway.state.keys import GROUP, Keys
from gateway.state.session import SessionStore
from tests.fakes.files import FakeFiles
from tests.fakes.llm_server import FakeLLM
from tests.support.harness import start_workers, texts
from tests.support.helpers import inbound, settings
from tests.support.media_files import png

KEY = "test:W:C1"


def item(name: str, text: str = "", group: str = "album-1", **extra: object) -> Inbound:
    photo = Attachment(kind="image", name=name, mime_type="image/png", file_id=f"id-{name}")
    return inbound(text, attachments=(photo,), media_group=group, **extra)  # type: ignore[arg-type]


async def test_an_albums_items_become_one_inbox_entry_with_one_job(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest = Ingest(settings(redis_url), redis_client)
    first = item("a.png", "two photos ✓")
    for message in (first, item("b.png"), item("c.png", "and a caption")):
        assert await ingest.receive(message) == Receipt.QUEUED
    [entry] = await SessionStore(redis_client).inbox(KEY)
    assert [a["name"] for a in entry["attachments"]] == ["a.png", "b.png", "c.png"]
    assert entry["text"] == "two photos ✓\n\nand a caption"
    assert entry["platform_message_id"] == first.message_id
    assert entry["reply"]["reply_to"] == first.reply.reply_to
    assert await redis_client.xlen(Keys.jobs("test", 0)) == 1


async def test_a_retried_album_item_is_not_added_twice(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest = Ingest(settings(redis_url), redis_client)
    await ingest.receive(item("a.png"))
    second = item("b.png")
    assert await ingest.receive(second) == Receipt.QUEUED
    assert await ingest.receive(second) == Receipt.DUPLICATE
    [entry] = await SessionStore(redis_client).inbox(KEY)
    assert len(entry["attachments"]) == 2


async def test_other_albums_and_plain_messages_stay_messages_of_their_own(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest = Ingest(settings(redis_url), redis_client)
    for message in (item("a.png"), inbound("plain"), item("x.png", group="album-2")):
        await ingest.receive(message)
    inbox = await SessionStore(redis_client).inbox(KEY)
    assert [e["text"] for e in inbox] == ["", "plain", ""]
    assert [len(e["attachments"]) for e in inbox] == [1, 0, 1]


async def test_an_item_after_its_album_was_claimed_is_a_message_of_its_own(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest, sessions = Ingest(settings(redis_url), redis_client), SessionStore(redis_client)
    await ingest.receive(item("a.png"))
    claim = await sessions.claim(KEY, "t1", 30, hold=False)
    assert claim.ok and claim.length == 1
    await ingest.receive(item("b.png"))
    [late] = await sessions.inbox(KEY)
    assert [a["name"] for a in late["attachments"]] == ["b.png"]


async def test_a_claim_waits_while_an_album_is_arriving(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest = Ingest(settings(redis_url, GATEWAY_ALBUM_WAIT=5), redis_client)
    sessions = SessionStore(redis_client)
    await ingest.receive(item("a.png"))
    waiting = await sessions.claim(KEY, "t1", 30)
    assert not waiting.ok and 4 < waiting.wait <= 5
    assert not await redis_client.exists(Keys.lease(KEY))  # nothing taken meanwhile
    assert len(await sessions.inbox(KEY)) == 1
    assert (await sessions.claim(KEY, "t1", 30, hold=False)).ok


async def test_without_an_album_wait_nothing_is_held(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest = Ingest(settings(redis_url, GATEWAY_ALBUM_WAIT=0), redis_client)
    await ingest.receive(item("a.png"))
    assert (await SessionStore(redis_client).claim(KEY, "t1", 30)).ok


async def test_in_a_group_the_albums_further_items_follow_its_first(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest = Ingest(settings(redis_url), redis_client)
    await ingest.receive(item("a.png", "@bot look", dm=False, mentions_bot=True))
    assert await ingest.receive(item("b.png", dm=False)) == Receipt.QUEUED
    stray = item("z.png", group="someone-elses", dm=False)
    assert await ingest.receive(stray) == Receipt.IGNORED
    [entry] = await SessionStore(redis_client).inbox(KEY)
    assert [a["name"] for a in entry["attachments"]] == ["a.png", "b.png"]


async def test_an_album_is_answered_in_one_turn_with_every_photo(
    redis_url: str, llm: FakeLLM, files: FakeFiles
) -> None:
    photos = [
        Attachment(kind="image", url=files.add(name, png()), name=name, mime_type="image/png")
        for name in ("one.png", "two.png")
    ]
    async with start_workers(redis_url, llm, 1, GATEWAY_ALBUM_WAIT=2) as h:
        await h.ingest.receive(inbound("my holiday", attachments=photos[:1], media_group="G"))
        await job_taken(h.sessions.redis)  # the worker holds it: the album is arriving
        last_item = time.monotonic()
        await h.ingest.receive(inbound("", attachments=photos[1:], media_group="G"))
        await h.idle(KEY)
        assert time.monotonic() - last_item >= 2.0  # the turn waited for more items
        [request] = llm.requests_for("main-model")
        users = [m for m in request["messages"] if m["role"] == "user"]
        assert len(users) == 1
        assert "my holiday\n[image: one.png]\n[image: two.png]" in str(users[0]["content"])
        assert len([t for t in texts(h.sender) if t.startswith("fake reply to")]) == 1


async def job_taken(redis: aioredis.Redis, within: float = 10.0) -> None:
    """Wait until a worker has read the session's turn job (it is pending in the group)."""
    async with asyncio.timeout(within):
        while (await redis.xpending(Keys.jobs("test", 0), GROUP))["pending"] == 0:
            await asyncio.sleep(0.01)
