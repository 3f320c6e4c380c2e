"""A whole turn through the real worker, with feedback asked for by scope: its reply is
registered under its last message with the model that answered (the session's own), and
counted once as delivered, buttons or not."""

from __future__ import annotations

import datetime as dt

from gateway.feedback.store import FeedbackStore, FeedbackVerdict
from gateway.settings.scoped import ScopedSettings
from tests.fakes.llm_server import FakeLLM
from tests.support.harness import start_workers
from tests.support.helpers import inbound

EPOCH = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)


async def test_a_turns_reply_takes_feedback_under_the_sessions_model(
    redis_url: str, llm: FakeLLM
) -> None:
    llm.set_model_behaviour("channel-model", reply="from the channel's model")
    async with start_workers(redis_url, llm, 1) as h:
        scoped = ScopedSettings(h.ingest.redis, h.workers[0].settings)
        await scoped.set("test", "feedback", "on")
        await scoped.set("test:W:C1", "model", "openai/channel-model")
        message = inbound("hello")
        await h.ingest.receive(message)
        await h.idle(message.session_key)
        last = h.sender.calls[-1].message_id
        store = FeedbackStore(h.ingest.redis)
        verdict = await store.record("test", message.channel, last, "U5", "up")
        assert verdict == FeedbackVerdict.RECORDED
        (vote,) = await store.since(EPOCH)
        assert (vote.session, vote.model) == (message.session_key, "openai/channel-model")
        assert (await h.metrics())["replies|test|edit"] == "1"

        await scoped.set("test", "feedback", "off")
        again = inbound("and again")
        await h.ingest.receive(again)
        await h.idle(again.session_key)
        unbuttoned = h.sender.calls[-1].message_id
        assert unbuttoned != last
        assert await store.record("test", message.channel, unbuttoned, "U5", "up") == (
            FeedbackVerdict.UNKNOWN
        )
        assert (await h.metrics())["replies|test|edit"] == "2"
