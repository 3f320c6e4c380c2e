"""MediaStore against a real Redis: items without their bytes, images beside them within
the session's cap, counts by kind, one-time notices, the hash's expiry."""

from __future__ import annotations

import redis.asyncio as aioredis

from gateway.media.items import MediaItem
from gateway.media.store import MediaStore, image_field, item_field
from gateway.state.keys import Keys

KEY = "test:W:C1"
PNG = "data:image/png;base64," + "A" * 100


def image(name: str) -> MediaItem:
    return MediaItem("image", name, image_mime="image/png", image=PNG)


async def test_an_item_is_stored_without_its_image_and_the_image_beside_it(
    redis_client: aioredis.Redis,
) -> None:
    store = MediaStore(redis_client, ttl=600, session_bytes=10_000)
    field = item_field("e1", 0)
    kept = await store.save(KEY, field, image("cat.png"))
    assert kept.image == PNG
    [item] = (await store.items(KEY, [field, item_field("e1", 1)])).values()
    assert item.name == "cat.png" and item.image is None
    assert await store.images(KEY, [image_field("e1", 0)]) == {image_field("e1", 0): PNG}
    assert 0 < await redis_client.ttl(Keys.media(KEY)) <= 600


async def test_an_image_past_the_sessions_cap_is_not_kept_and_its_item_says_so(
    redis_client: aioredis.Redis,
) -> None:
    store = MediaStore(redis_client, ttl=600, session_bytes=len(PNG) + 10)
    await store.save(KEY, item_field("e1", 0), image("first.png"))
    second = await store.save(KEY, item_field("e2", 0), image("second.png"))
    assert second.image is None and second.note is not None and "over their limit" in second.note
    assert await store.images(KEY, [image_field("e2", 0)]) == {}
    # The refused image's bytes are not counted: a smaller one still fits.
    small = MediaItem("image", "tiny.png", image_mime="image/png", image="data:,x")
    assert (await store.save(KEY, item_field("e3", 0), small)).image == "data:,x"


async def test_the_kept_files_are_counted_by_kind(redis_client: aioredis.Redis) -> None:
    store = MediaStore(redis_client, ttl=600, session_bytes=10_000)
    await store.save(KEY, item_field("e1", 0), image("a.png"))
    await store.save(KEY, item_field("e1", 1), MediaItem("document", "b.pdf", text="words"))
    await store.save(KEY, item_field("e2", 0), MediaItem("document", "c.txt", text="more"))
    await store.first_time(KEY, "vision")
    assert await store.kept(KEY) == {"image": 1, "document": 2}


async def test_a_notice_is_given_once_per_session(redis_client: aioredis.Redis) -> None:
    store = MediaStore(redis_client, ttl=600, session_bytes=10_000)
    assert await store.first_time(KEY, "vision")
    assert not await store.first_time(KEY, "vision")
    assert await store.first_time(KEY, "transcription")
    assert await store.first_time("test:W:C2", "vision")
