"""Streamed edits, continuations, a rate limit mid-stream, whole texts delivered."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway.delivery.pacing import SendPacing
from gateway.delivery.stream import ReplyStream, deliver
from gateway.errors import LeaseLost, PlatformError
from gateway.messages import Address
from tests.support.recording_sender import RecordingSender

ADDRESS = Address(platform="test", workspace="w", channel="c")


async def test_stream_posts_once_then_edits_and_delivers_the_final_text() -> None:
    sender = RecordingSender(edit_interval=0.05)
    ids: list[list[str]] = []

    async def on_ids(new: list[str]) -> None:
        ids.append(list(new))

    stream = ReplyStream(sender, ADDRESS, pacing=None, known_ids=[], on_ids=on_ids)
    stream.start()
    for word in ["Hello", " there", ",", " friend"]:
        stream.feed(word)
        await asyncio.sleep(0.03)
    await stream.finish("Hello there, friend")
    sends = [c for c in sender.calls if c.op == "send"]
    assert len(sends) == 1
    assert sender.messages["1"] == "Hello there, friend"
    edits = [c for c in sender.calls if c.op == "edit"]
    gaps = [b.at - a.at for a, b in zip(sender.calls, sender.calls[1:], strict=False)]
    assert all(gap >= 0.045 for gap in gaps[:-1]) or len(edits) <= 1
    assert ids == [["1"]]
    assert sender.thinking_calls == []  # shown within the thinking grace: no signal


async def test_the_post_that_ends_a_flush_is_stored_with_the_text_in_one_call() -> None:
    sender = RecordingSender(edit_interval=0.01)
    ids: list[list[str]] = []
    progress: list[tuple[str, list[str] | None]] = []

    async def on_ids(new: list[str]) -> None:
        ids.append(list(new))

    async def on_flush(text: str, stored: list[str] | None) -> None:
        progress.append((text, stored))

    stream = ReplyStream(
        sender, ADDRESS, pacing=None, known_ids=[], on_ids=on_ids, on_flush=on_flush
    )
    stream.start()
    stream.feed("Hello")
    await sender.wait_for(lambda: progress)
    stream.feed(" there")
    await sender.wait_for(lambda: len(progress) == 2)
    assert await stream.finish("Hello there") == ["1"]
    assert progress == [("Hello", ["1"]), ("Hello there", None)]
    assert ids == []


async def test_a_reply_slower_than_the_grace_shows_the_thinking_signal_and_clears_it() -> None:
    sender = RecordingSender(edit_interval=0.05)

    async def on_ids(new: list[str]) -> None:
        return None

    stream = ReplyStream(
        sender, ADDRESS, pacing=None, known_ids=[], on_ids=on_ids, thinking_grace=0.05
    )
    stream.start()
    await sender.wait_for(lambda: sender.thinking_calls == [True])
    stream.feed("late")
    await stream.finish("late answer")
    assert sender.thinking_calls == [True, False]
    assert sender.messages["1"] == "late answer"


async def test_rerun_edits_known_messages_instead_of_posting() -> None:
    sender = RecordingSender()

    async def on_ids(new: list[str]) -> None:
        return None

    stream = ReplyStream(sender, ADDRESS, pacing=None, known_ids=["41"], on_ids=on_ids)
    stream.start()
    await stream.finish("second run's answer")
    assert [c.op for c in sender.calls] == ["edit"]
    assert sender.calls[0].message_id == "41"


async def test_long_reply_continues_in_more_messages() -> None:
    sender = RecordingSender(max_length=100)

    async def on_ids(new: list[str]) -> None:
        return None

    stream = ReplyStream(sender, ADDRESS, pacing=None, known_ids=[], on_ids=on_ids)
    stream.start()
    text = "\n\n".join(f"Paragraph {i}: " + "words " * 10 for i in range(6))
    await stream.finish(text)
    assert len(stream.ids) >= 4
    shown = "\n\n".join(sender.messages[i] for i in stream.ids)
    assert shown.split() == text.split()


async def test_rate_limit_mid_stream_drops_edits_and_still_delivers_the_final_text() -> None:
    sender = RecordingSender(edit_interval=0.01)

    async def on_ids(new: list[str]) -> None:
        return None

    stream = ReplyStream(sender, ADDRESS, pacing=None, known_ids=[], on_ids=on_ids)
    stream.start()
    stream.feed("first")
    await sender.wait_for(lambda: sender.messages)
    sender.rate_limit_next.append(0.5)
    limited_at = time.monotonic()
    for piece in [" two", " three", " four"]:
        stream.feed(piece)
        await asyncio.sleep(0.05)
    await stream.finish("first two three four five")
    after = [c for c in sender.calls if c.at > limited_at and c.op != "429"]
    assert after, "the final text never arrived"
    assert all(c.at - limited_at >= 0.49 for c in after), "a call went out during the wait"
    assert sender.messages["1"] == "first two three four five"


async def test_deliver_posts_each_piece_final(redis_client: aioredis.Redis) -> None:
    sender = RecordingSender(max_length=50)
    ids = await deliver(sender, ADDRESS, "word " * 40, SendPacing(redis_client))
    assert len(ids) >= 4 and all(c.final for c in sender.calls)


async def test_deliver_names_each_piece_and_a_rerun_skips_those_found() -> None:
    """Each piece is posted under `key:index`; a re-run's `find` is asked for each piece
    first and only the pieces it does not find are posted (one it cannot look up is)."""
    sender = RecordingSender(max_length=50)
    text = "word " * 40
    first = await deliver(sender, ADDRESS, text, key="s:job-1")
    keys = [c.key for c in sender.calls]
    assert keys == [f"s:job-1:{i}" for i in range(len(first))]
    posted = dict(zip(keys, first, strict=True))
    asked: list[str] = []

    async def find(address: Address, key: str) -> str | None:
        asked.append(key)
        if key.endswith(":1"):
            raise PlatformError("conversations.history: ratelimited")
        return posted[key] if key != "s:job-1:0" else None

    again = await deliver(sender, ADDRESS, text, key="s:job-1", find=find)
    assert asked == keys
    assert [c.key for c in sender.calls[len(first) :]] == ["s:job-1:0", "s:job-1:1"]
    assert again[2:] == first[2:]


async def test_a_run_that_lost_its_turn_posts_no_new_message() -> None:
    """The run that took the turn over cannot know a message posted now: none is."""
    sender = RecordingSender(edit_interval=0.01)

    async def on_ids(new: list[str]) -> None:
        return None

    async def may_post() -> bool:
        return False

    stream = ReplyStream(
        sender, ADDRESS, pacing=None, known_ids=[], on_ids=on_ids, may_post=may_post
    )
    stream.start()
    stream.feed("partial")
    await asyncio.sleep(0.1)
    with pytest.raises(LeaseLost):
        await stream.finish("the whole answer")
    assert [c for c in sender.calls if c.op in ("send", "edit")] == []


async def test_ids_that_could_not_be_stored_are_stored_at_the_next_flush() -> None:
    sender = RecordingSender(edit_interval=0.01)
    stored: list[list[str]] = []
    failures = [RedisConnectionError("Redis restarting")]

    async def on_ids(new: list[str]) -> None:
        if failures:
            raise failures.pop()
        stored.append(list(new))

    stream = ReplyStream(sender, ADDRESS, pacing=None, known_ids=[], on_ids=on_ids)
    stream.start()
    stream.feed("first piece")
    await asyncio.sleep(0.1)  # posted by the pump; storing its id failed
    stream.feed(" and more")
    await asyncio.sleep(0.1)  # the pump is still running and stores it now
    assert stored == [["1"]]
    await stream.finish("first piece and more")
    assert sender.messages == {"1": "first piece and more"}
