"""The media step on its own: real Redis, the loopback file host, files made in the test."""

from __future__ import annotations

import asyncio
import platform
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from redis.asyncio import Redis

from gateway.context.media_parts import MediaView
from gateway.media.images import convert
from gateway.media.items import image_entry_ids
from gateway.media.memory import return_large_buffers
from gateway.media.pipeline import NO_VISION_NOTE, NO_VISION_NOTICE, MediaPipeline
from gateway.messages import Attachment
from gateway.metrics import Metrics
from gateway.models import Models
from gateway.models.scripted import echo
from gateway.state.keys import Keys
from tests.fakes.files import FakeFiles
from tests.support.helpers import settings
from tests.support.media_files import png

KEY = "test:W:C1"
NOT_FOUND = "not found (the link may have expired)"
NOT_KEPT = "not kept: this conversation's stored images are over their limit"


@asynccontextmanager
async def pipeline(redis: Redis, **values: Any) -> AsyncIterator[MediaPipeline]:
    config = settings("redis://unused", **values)
    media = MediaPipeline(config, redis, Models(echo()), Metrics(redis))
    try:
        yield media
    finally:
        await media.aclose()


def image(url: str, name: str) -> Attachment:
    return Attachment(kind="image", url=url, name=name, mime_type="image/png")


def document(url: str, name: str) -> Attachment:
    return Attachment(kind="file", url=url, name=name)


def entry(entry_id: str, *attachments: Attachment) -> dict[str, Any]:
    dumped = [a.model_dump(exclude_none=True) for a in attachments]
    return {"id": entry_id, "role": "user", "text": "look", "attachments": dumped}


async def test_a_rerun_finds_the_stored_items_and_tells_nobody_twice(
    redis_client: Redis, files: FakeFiles
) -> None:
    ok = image(files.add("photo.png", png(), content_type="image/png"), "photo.png")
    gone = image(f"{files.url}/files/gone.png", "gone.png")
    entries = [entry("e1", ok, gone)]
    async with pipeline(redis_client) as media:
        first = await media.prepare(KEY, entries, entries, vision=False)
        again = await media.prepare(KEY, entries, entries, vision=False)
    assert first.notices == (f"gone.png: {NOT_FOUND}", NO_VISION_NOTICE)
    assert (again.notices, again.notes) == ((), ())
    assert again.items == first.items
    assert first.items["e1"][1].note == NOT_FOUND
    assert len(files.requests) == 2  # each file fetched once; the re-run read Redis


async def test_files_past_the_message_limit_are_refused_without_a_download(
    redis_client: Redis, files: FakeFiles
) -> None:
    docs = [document(files.add(f"{n}.txt", b"text " + n.encode()), f"{n}.txt") for n in "abc"]
    entries = [entry("e1", *docs)]
    async with pipeline(redis_client, GATEWAY_MEDIA_MESSAGE_FILES=2) as media:
        found = await media.prepare(KEY, entries, entries, vision=True)
    items = found.items["e1"]
    assert [items[0].text, items[1].text] == ["text a", "text b"]
    assert items[2].failed and items[2].note == "over the 2 files one message may carry"
    assert found.notices == ("c.txt: over the 2 files one message may carry",)
    assert sorted(r.path for r in files.requests) == ["/files/a.txt", "/files/b.txt"]


async def test_bytes_past_the_message_allowance_fail_that_file_only(
    redis_client: Redis, files: FakeFiles
) -> None:
    big = [document(files.add(f"{n}.txt", b"a" * 1_000_000), f"{n}.txt") for n in ("x", "y")]
    small = document(files.add("small.txt", b"kept"), "small.txt")
    entries = [entry("e1", *big, small)]
    async with pipeline(redis_client, GATEWAY_MEDIA_MESSAGE_BYTES=1_500_000) as media:
        found = await media.prepare(KEY, entries, entries, vision=True)
    items = found.items["e1"]
    refused = [items[i] for i in (0, 1) if items[i].failed]
    assert [item.note for item in refused] == ["over the 1.5 MB one message may carry"]
    assert found.notices == (f"{refused[0].name}: over the 1.5 MB one message may carry",)
    assert items[2].text == "kept"


async def test_images_past_the_sessions_byte_budget_are_stored_and_shown_by_name(
    redis_client: Redis, files: FakeFiles
) -> None:
    size = len(convert(png(), 50_000_000, 1568).data_url())
    url = files.add("photo.png", png(), content_type="image/png")
    first, second = entry("e1", image(url, "a.png")), entry("e2", image(url, "b.png"))
    async with pipeline(redis_client, GATEWAY_MEDIA_SESSION_BYTES=size + size // 2) as media:
        await media.prepare(KEY, [first], [first], vision=True)
        found = await media.prepare(KEY, [first, second], [second], vision=True)
    kept, dropped = found.items["e1"][0], found.items["e2"][0]
    assert kept.image is not None and kept.image.startswith("data:image/jpeg;base64,")
    assert (dropped.image, dropped.note, dropped.failed) == (None, NOT_KEPT, False)
    assert found.notices == ()  # the image was read: the model is told, in its place
    view = MediaView(found.items, True, frozenset({"e1", "e2"}))
    assert view.render(second) == ([f"[image: b.png, {NOT_KEPT}]"], [])
    assert len(view.render(first)[1]) == 1
    assert await redis_client.hget(Keys.media(KEY), "bytes") == str(size)


async def test_a_failed_download_among_several_keeps_the_others(
    redis_client: Redis, files: FakeFiles
) -> None:
    attachments = (
        image(files.add("photo.png", png(), content_type="image/png"), "photo.png"),
        image(f"{files.url}/files/gone.png", "gone.png"),
        document(files.add("refused.md", b"# no", status=403), "refused.md"),
        document(files.add("notes.md", b"# kept"), "notes.md"),
    )
    entries = [entry("e1", *attachments)]
    async with pipeline(redis_client) as media:
        found = await media.prepare(KEY, entries, entries, vision=True)
    photo, gone, refused, notes = (found.items["e1"][i] for i in range(4))
    assert photo.image is not None and not photo.failed
    assert (gone.failed, refused.failed, notes.text) == (True, True, "# kept")
    assert found.notices == (
        f"gone.png: {NOT_FOUND}",
        "refused.md: access to the file was refused",
    )


async def test_no_more_files_are_downloaded_at_once_than_the_concurrency_allows(
    redis_client: Redis, files: FakeFiles
) -> None:
    def slow(name: str) -> Attachment:
        return document(files.add(name, b"s" * 8_000, trickle=0.01), name)

    one = [entry("e1", *(slow(f"a{n}.txt") for n in range(3)))]
    two = [entry("e2", *(slow(f"b{n}.txt") for n in range(3)))]
    async with pipeline(redis_client, GATEWAY_MEDIA_CONCURRENCY=2) as media:
        found = await asyncio.gather(
            media.prepare(KEY, one, one, vision=True),
            media.prepare("test:W:C2", two, two, vision=True),
        )
    assert files.most_active == 2
    assert all(
        item.text == "s" * 8_000 for f in found for i in f.items.values() for item in i.values()
    )


async def test_images_are_sent_as_images_for_the_last_image_turns_only(
    redis_client: Redis, files: FakeFiles
) -> None:
    url = files.add("photo.png", png(), content_type="image/png")
    entries = [entry(f"e{n}", image(url, f"{n}.png")) for n in range(1, 4)]
    later = [*entries, {"id": "e4", "role": "user", "text": "and now?"}]
    async with pipeline(redis_client, GATEWAY_IMAGE_TURNS=2) as media:
        for n in range(3):
            await media.prepare(KEY, entries[: n + 1], entries[n : n + 1], vision=True)
        found = await media.prepare(KEY, later, [later[-1]], vision=True)
    view = MediaView(found.items, True, frozenset(image_entry_ids(later, 2)))
    assert [len(view.render(e)[1]) for e in entries] == [0, 0, 1]
    assert found.items["e3"][0].image is not None  # read back from Redis for this turn
    assert found.items["e1"][0].image is None
    assert len(files.requests) == 3


async def test_a_model_that_cannot_see_is_noted_each_time_and_the_user_told_once(
    redis_client: Redis, files: FakeFiles
) -> None:
    url = files.add("photo.png", png(), content_type="image/png")
    first, second = entry("e1", image(url, "a.png")), entry("e2", image(url, "b.png"))
    async with pipeline(redis_client) as media:
        told = await media.prepare(KEY, [first], [first], vision=False)
        again = await media.prepare(KEY, [first, second], [second], vision=False)
    assert (told.notes, told.notices) == ((NO_VISION_NOTE,), (NO_VISION_NOTICE,))
    assert (again.notes, again.notices) == ((NO_VISION_NOTE,), ())
    assert all(i.image is None for items in again.items.values() for i in items.values())


@pytest.mark.parametrize("vision", [True, False])
async def test_a_message_without_files_costs_nothing(redis_client: Redis, vision: bool) -> None:
    entries = [{"id": "e1", "role": "user", "text": "hello"}]
    async with pipeline(redis_client) as media:
        found = await media.prepare(KEY, entries, entries, vision=vision)
    assert (found.items, found.notices, found.notes) == ({}, (), ())
    assert not await redis_client.exists(Keys.media(KEY))


def test_large_buffers_are_mapped_on_their_own_where_the_c_library_allows() -> None:
    assert return_large_buffers() == (platform.libc_ver()[0] == "glibc")
