"""A main turn written through a platform's own streaming surface, end to end in a worker:
`/btw` while it streams sees the reply being written, `/stop` closes the live message with
what was written, and the reply is recorded once."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from tests.fakes.llm_server import FakeLLM
from tests.support.harness import Harness, start_workers
from tests.support.helpers import inbound
from tests.support.recording_sender import RecordingNativeSender


@pytest.fixture
def native() -> RecordingNativeSender:
    return RecordingNativeSender()


@pytest.fixture
async def streaming(
    redis_url: str, llm: FakeLLM, native: RecordingNativeSender
) -> AsyncIterator[Harness]:
    async with start_workers(redis_url, llm, 1, senders={"test": native}) as h:
        yield h


async def test_btw_during_a_live_reply_sees_the_text_being_written(
    streaming: Harness, native: RecordingNativeSender
) -> None:
    streaming.llm.reply = "The first half of the answer, and then the second half."
    streaming.llm.hang_next(model="main-model", after_tokens=4)
    message = inbound("tell me")
    await streaming.ingest.receive(message)
    await native.wait_for(lambda: native.live_calls, timeout=15)
    shown = native.live_calls[-1].text
    await streaming.ingest.receive(inbound("/btw what is it saying?"))
    (side,) = await streaming.llm.await_requests(1, timeout=15, model="side-model")
    assert shown.strip() and shown.strip() in json.dumps(side["messages"])
    await streaming.ingest.receive(inbound("/stop"))
    await streaming.idle(message.session_key)
    history = await streaming.history(message.session_key)
    assert [e["role"] for e in history] == ["user", "assistant"]
    main = [c for c in native.live_calls if c.op == "close"]
    assert len(main) == 1 and main[0].live == 0 and main[0].text.startswith(shown.strip())
    assert main[0].text.endswith("_(stopped)_")
    side_answers = [c for c in native.calls if c.address is not None and c.address.side]
    assert [c.op for c in side_answers] == ["send"]  # the side answer: aside, never live
    assert history[1]["platform_message_ids"] == [native.lives[0].message_id]
