"""Processed attachments in Redis: one hash per session, `gw:{S}:media`.

    <entry id>:<index>          the MediaItem, as JSON (no image bytes)
    <entry id>:<index>:image    its re-encoded image, a data URL (images only)
    bytes                       the image bytes kept for the session so far
    told:<what>                 a one-time notice already given ("vision", "transcription")

The hash expires `ttl` seconds after its last write; a reset and retention
remove it with the session's other keys. Images past the session's byte cap
are not kept: their item stays, and the model reads their name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from redis.asyncio import Redis

from gateway.media.items import MediaItem
from gateway.state.keys import Keys

BYTES = "bytes"


def item_field(entry_id: str, index: int) -> str:
    return f"{entry_id}:{index}"


def image_field(entry_id: str, index: int) -> str:
    return f"{entry_id}:{index}:image"


class MediaStore:
    """Reads and writes one session's processed attachments."""

    def __init__(self, redis: Redis, ttl: int, session_bytes: int) -> None:
        self.redis, self.ttl, self.session_bytes = redis, ttl, session_bytes

    async def items(self, session_key: str, fields: Sequence[str]) -> dict[str, MediaItem]:
        """The stored items among `fields` (one round trip)."""
        if not fields:
            return {}
        found = cast(list[str | None], await self.redis.hmget(Keys.media(session_key), fields))
        return {f: MediaItem.load(raw) for f, raw in zip(fields, found, strict=True) if raw}

    async def images(self, session_key: str, fields: Sequence[str]) -> dict[str, str]:
        """The stored images (data URLs) among `fields`."""
        if not fields:
            return {}
        found = cast(list[str | None], await self.redis.hmget(Keys.media(session_key), fields))
        return {f: raw for f, raw in zip(fields, found, strict=True) if raw}

    async def save(self, session_key: str, field: str, item: MediaItem) -> MediaItem:
        """Store `item` (and its image, while the session's cap allows); returns it as kept."""
        key = Keys.media(session_key)
        image = item.image
        if image is not None and not await self._room_for(key, len(image)):
            image = None
            item = MediaItem(
                item.kind,
                item.name,
                note="not kept: this conversation's stored images are over their limit",
            )
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, field, item.dump())
            if image is not None:
                pipe.hset(key, f"{field}:image", image)
            pipe.expire(key, self.ttl)
            await pipe.execute()
        return item.with_image(image)

    async def kept(self, session_key: str) -> dict[str, int]:
        """How many processed files the session keeps, by kind ("image", "voice", "file")."""
        key = Keys.media(session_key)
        fields = [f for f in cast(list[str], await self.redis.hkeys(key)) if _is_item(f)]
        counts: dict[str, int] = {}
        for item in (await self.items(session_key, fields)).values():
            counts[item.kind] = counts.get(item.kind, 0) + 1
        return counts

    async def first_time(self, session_key: str, what: str) -> bool:
        """True once per session (until its media expire or a reset) for each `what`."""
        return bool(await self.redis.hsetnx(Keys.media(session_key), f"told:{what}", 1))

    async def _room_for(self, key: str, size: int) -> bool:
        total = int(await self.redis.hincrby(key, BYTES, size))
        if total <= self.session_bytes:
            return True
        await self.redis.hincrby(key, BYTES, -size)
        return False


def _is_item(field: str) -> bool:
    entry, _, index = field.rpartition(":")
    return bool(entry) and index.isdigit()
