"""A reply through the platform's own streaming surface (a LiveMessage): shown as it grows,
closed with the final text, continued past the limit, kept alive, and carried on edited in
place when the platform refuses it at the start or midway."""

from __future__ import annotations

import asyncio
import itertools

import redis.asyncio as aioredis

from gateway.delivery.pacing import SendPacing
from gateway.delivery.stream import ReplyStream
from gateway.errors import StreamRefused
from gateway.messages import Address
from gateway.ports import Step
from tests.support.recording_sender import RecordingNativeSender

ADDRESS = Address(platform="test", workspace="w", channel="c", thread="t1")


class Ids:
    """What the stream stored of its message ids, and the refusals it reported."""

    def __init__(self) -> None:
        self.stored: list[list[str]] = []
        self.refusals: list[tuple[str, StreamRefused]] = []

    async def on_ids(self, ids: list[str]) -> None:
        self.stored.append(list(ids))

    async def on_refused(self, mechanism: str, error: StreamRefused) -> None:
        self.refusals.append((mechanism, error))


def live_stream(
    sender: RecordingNativeSender,
    ids: Ids,
    *,
    known: list[str] | None = None,
    feedback: bool = False,
    pacing: SendPacing | None = None,
) -> ReplyStream:
    stream = ReplyStream(
        sender,
        ADDRESS,
        pacing=pacing,
        known_ids=known or [],
        on_ids=ids.on_ids,
        mechanism="live",
        recipient="U1",
        on_refused=ids.on_refused,
        feedback=feedback,
    )
    stream.start()
    return stream


async def test_a_live_reply_grows_then_closes_with_the_final_text_and_no_edit() -> None:
    sender = RecordingNativeSender(live_interval=0.01)
    ids = Ids()
    stream = live_stream(sender, ids, feedback=True)
    stream.feed("Hello")
    await sender.wait_for(lambda: sender.live_calls)
    stream.feed(" there")
    await sender.wait_for(lambda: sender.live_calls[-1].text == "Hello there")
    result = await stream.finish("Hello there, friend")
    assert [c.op for c in sender.calls] == [], "nothing was posted or edited"
    assert sender.live_calls[0].text == "Hello"
    assert sender.live_calls[-1].op == "close" and sender.live_calls[-1].feedback
    assert sender.messages[result[0]] == "Hello there, friend"
    assert result == [sender.lives[0].message_id] and ids.stored[0] == result
    assert sender.lives[0].recipient == "U1"
    assert stream.mechanism == "live"


async def test_the_first_text_is_shown_at_once_not_after_an_interval() -> None:
    sender = RecordingNativeSender(live_interval=30.0)
    stream = live_stream(sender, Ids())
    stream.feed("first words")
    await sender.wait_for(lambda: sender.live_calls, timeout=2.0)
    await stream.finish("first words, and the rest")
    assert [c.op for c in sender.live_calls] == ["show", "close"]


async def test_a_refusal_at_the_start_carries_the_reply_on_edited_in_place() -> None:
    sender = RecordingNativeSender(refuse_at={1})
    ids = Ids()
    stream = live_stream(sender, ids)
    stream.feed("Hello")
    await sender.wait_for(lambda: any(c.op == "send" for c in sender.calls))
    result = await stream.finish("Hello, all of it")
    assert [m for m, _ in ids.refusals] == ["live"] and ids.refusals[0][1].for_channel
    assert len(result) == 1 and sender.messages[result[0]] == "Hello, all of it"
    assert next(c.op for c in sender.calls if c.op in ("send", "edit")) == "send"
    assert stream.mechanism == "edit"


async def test_a_stream_refused_midway_is_closed_then_edited_to_the_whole_text_once() -> None:
    sender = RecordingNativeSender(refuse_at={2}, refuse_for_channel=False)
    ids = Ids()
    stream = live_stream(sender, ids)
    stream.feed("Part one")
    await sender.wait_for(lambda: sender.live_calls)
    stream.feed(", part two")
    await sender.wait_for(lambda: any(c.op == "refused show" for c in sender.calls))
    result = await stream.finish("Part one, part two, the end")
    streamed = sender.lives[0].message_id
    assert result == [streamed], "the streamed message goes on, no second message"
    assert sender.closed_streams == [streamed]
    assert not any(c.op == "send" for c in sender.calls)
    assert sender.messages[streamed] == "Part one, part two, the end"
    assert not ids.refusals[0][1].for_channel


async def test_a_draft_refused_midway_ends_as_one_posted_message() -> None:
    sender = RecordingNativeSender(live_has_id=False, refuse_at={2})
    stream = live_stream(sender, Ids())
    stream.feed("Drafted")
    await sender.wait_for(lambda: sender.live_calls)
    stream.feed(" more")
    await sender.wait_for(lambda: any(c.op == "refused show" for c in sender.calls))
    result = await stream.finish("Drafted more, done")
    assert len(result) == 1 and sender.messages[result[0]] == "Drafted more, done"
    assert [c.op for c in sender.calls if c.op == "send"] == ["send"]
    assert sender.closed_streams == [], "a draft is no message: nothing to close"


async def test_a_refused_close_delivers_the_final_text_edited_in_place() -> None:
    sender = RecordingNativeSender(refuse_at={2})
    stream = live_stream(sender, Ids())
    stream.feed("Almost")
    await sender.wait_for(lambda: sender.live_calls)
    result = await stream.finish("Almost there: the final text")
    assert result == [sender.lives[0].message_id]
    assert sender.messages[result[0]] == "Almost there: the final text"


async def test_a_reply_past_the_limit_closes_one_live_message_and_opens_the_next() -> None:
    sender = RecordingNativeSender(max_length=40)
    stream = live_stream(sender, Ids())
    words = " ".join(f"word{i}" for i in range(20))
    result = await stream.finish(words)
    assert len(result) >= 2 and len(sender.lives) == len(result)
    assert " ".join(sender.messages[i] for i in result).split() == words.split()
    closes = [c for c in sender.live_calls if c.op == "close"]
    assert [c.live for c in closes] == list(range(len(result)))


async def test_an_unchanged_draft_is_shown_again_before_it_lapses() -> None:
    sender = RecordingNativeSender(live_has_id=False, live_refresh=0.1)
    stream = live_stream(sender, Ids())
    stream.feed("Waiting on a tool")
    await sender.wait_for(lambda: len(sender.live_calls) >= 3, timeout=5.0)
    shows = [c for c in sender.live_calls if c.op == "show"]
    assert {c.text for c in shows} == {"Waiting on a tool"}
    assert all(b.at - a.at >= 0.09 for a, b in itertools.pairwise(shows))
    await stream.finish("Waiting on a tool: done")


async def test_tool_steps_go_to_the_timeline_not_into_the_text() -> None:
    sender = RecordingNativeSender()
    stream = live_stream(sender, Ids())
    stream.set_status("_⚙️ running `search` (0 s)_")
    stream.set_step(Step("call1", "search: weather", "in_progress"))
    await stream.posted()
    assert sender.live_calls[0].text == "" and sender.live_calls[0].steps[0].id == "call1"
    stream.set_step(Step("call1", "search: weather", "complete"))
    stream.feed("Sunny.")
    await sender.wait_for(lambda: sender.live_calls[-1].text == "Sunny.")
    await stream.finish("Sunny.")
    assert sender.live_calls[-1].steps == (Step("call1", "search: weather", "complete"),)
    assert all("running" not in c.text for c in sender.live_calls)


async def test_a_rerun_closes_the_stream_its_predecessor_left_and_edits_it() -> None:
    sender = RecordingNativeSender()
    stream = live_stream(sender, Ids(), known=["41"])
    result = await stream.finish("The re-run's whole answer")
    assert sender.closed_streams == ["41"] and sender.lives == []
    assert [(c.op, c.message_id) for c in sender.calls] == [("edit", "41")]
    assert result == ["41"]


async def test_nothing_goes_out_during_a_rate_limit_wait_and_the_final_text_arrives(
    redis_client: aioredis.Redis,
) -> None:
    sender = RecordingNativeSender(chat_interval=0.01, rate_limit_next=[])
    stream = live_stream(sender, Ids(), pacing=SendPacing(redis_client))
    stream.feed("One")
    await sender.wait_for(lambda: sender.live_calls)
    sender.rate_limit_next.append(0.5)
    stream.feed(" two")
    await sender.wait_for(lambda: any(c.op == "429" for c in sender.calls))
    limited = next(c.at for c in sender.calls if c.op == "429")
    stream.feed(" three")
    await asyncio.sleep(0)  # the pump sees the new text while the wait holds
    result = await stream.finish("One two three")
    after = [c for c in sender.live_calls if c.at > limited]
    assert after and all(c.at >= limited + 0.49 for c in after)
    assert sender.messages[result[0]] == "One two three"


async def test_a_flush_that_starts_the_live_message_stores_its_id_with_the_text() -> None:
    """One store a flush: the started message's id goes with the text shown (for /btw),
    and the close, which names the same message, stores nothing again."""
    sender = RecordingNativeSender(live_interval=0.01)
    ids = Ids()
    progress: list[tuple[str, list[str] | None]] = []

    async def on_flush(text: str, stored: list[str] | None) -> None:
        progress.append((text, stored))

    stream = ReplyStream(
        sender,
        ADDRESS,
        pacing=None,
        known_ids=[],
        on_ids=ids.on_ids,
        on_flush=on_flush,
        mechanism="live",
        recipient="U1",
    )
    stream.start()
    stream.feed("Hello")
    await sender.wait_for(lambda: progress)
    stream.feed(" there")
    await sender.wait_for(lambda: len(progress) == 2)
    result = await stream.finish("Hello there")
    message_id = sender.lives[0].message_id
    assert progress == [("Hello", [message_id]), ("Hello there", None)]
    assert ids.stored == [], "stored with the text, not once more on its own"
    assert result == [message_id]
