"""A turn's model call: pieces fed to its reply until they end, a /stop or a lost lease;
the call itself through litellm to the loopback model."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import redis.asyncio as aioredis

from gateway.delivery.stream import ReplyStream
from gateway.errors import ModelBadResponse, ModelError, ModelTimeout
from gateway.models import Usage
from gateway.state.keys import Keys
from gateway.state.lease import Lease
from gateway.turn.generation import LEASE_LOST, RunningTurn, generate
from gateway.turn.runner import TurnRunner
from tests.fakes.llm_server import FakeLLM
from tests.support.helpers import inbound
from tests.support.recording_sender import RecordingSender

ADDRESS = inbound("").reply


def reply_stream(sender: RecordingSender) -> ReplyStream:
    async def keep(ids: list[str]) -> None:
        pass

    return ReplyStream(sender, ADDRESS, pacing=None, known_ids=[], on_ids=keep)


def running_turn(redis: aioredis.Redis) -> RunningTurn:
    return RunningTurn("test:W:C1", Lease(redis, Keys.lease("test:W:C1"), 5.0))


async def pieces_then(error: BaseException | None, *pieces: str) -> AsyncIterator[str]:
    for piece in pieces:
        yield piece
    if error is not None:
        raise error


async def pieces_then_hang(started: asyncio.Event, *pieces: str) -> AsyncIterator[str]:
    for piece in pieces:
        yield piece
    started.set()
    await asyncio.Event().wait()
    yield "never"


async def test_every_piece_reaches_the_reply_and_the_result_is_whole(
    redis_client: aioredis.Redis, sender: RecordingSender
) -> None:
    stream = reply_stream(sender)
    result = await generate(pieces_then(None, "Hel", "lo"), stream, running_turn(redis_client))
    assert result.text == "Hello" and result.whole
    assert stream.text == "Hello"


async def test_a_model_error_mid_answer_keeps_the_text_so_far_with_the_error(
    redis_client: aioredis.Redis, sender: RecordingSender
) -> None:
    stream = reply_stream(sender)
    timeout = ModelTimeout("no more")
    result = await generate(pieces_then(timeout, "part"), stream, running_turn(redis_client))
    assert result.error is timeout and result.text == "part" and not result.whole


async def test_an_answer_nothing_expected_is_a_bad_response_not_a_crash(
    redis_client: aioredis.Redis, sender: RecordingSender
) -> None:
    stream = reply_stream(sender)
    broken = pieces_then(KeyError("choices"), "x")
    result = await generate(broken, stream, running_turn(redis_client))
    assert isinstance(result.error, ModelBadResponse) and isinstance(result.error, ModelError)


async def test_a_stop_ends_the_call_with_the_text_so_far(
    redis_client: aioredis.Redis, sender: RecordingSender
) -> None:
    stream, running, started = reply_stream(sender), running_turn(redis_client), asyncio.Event()
    task = asyncio.create_task(generate(pieces_then_hang(started, "Once"), stream, running))
    await asyncio.wait_for(started.wait(), 5)
    running.request_stop("stopped by user")
    result = await asyncio.wait_for(task, 5)
    assert result.stopped and result.text == "Once" and result.error is None
    assert running.reason == "stopped by user"


async def test_a_lost_lease_stops_the_call_and_says_why(
    redis_client: aioredis.Redis, sender: RecordingSender
) -> None:
    stream, running, started = reply_stream(sender), running_turn(redis_client), asyncio.Event()
    task = asyncio.create_task(generate(pieces_then_hang(started, "Once"), stream, running))
    await asyncio.wait_for(started.wait(), 5)
    running.lease.lost.set()
    result = await asyncio.wait_for(task, 5)
    assert result.stopped and running.stop.is_set() and running.reason == LEASE_LOST


async def test_a_turns_call_streams_the_models_answer_into_its_reply(
    turns: TurnRunner, sender: RecordingSender, llm: FakeLLM
) -> None:
    message = inbound("what is the plan?")
    await turns.sessions.append_user(message)
    claim = await turns.sessions.claim(message.session_key, "token", 5.0)
    assert claim.view is not None
    user = claim.view.entries[-1]
    context = turns.preparer.context(message.session_key, claim.view, user, message.reply, [])
    prepared = turns.preparer.compile(context, claim.view)
    stream = reply_stream(sender)
    running = RunningTurn(message.session_key, turns.claims.lease(message.session_key))
    result, chain = await turns.generation.call(
        message.session_key, prepared, Usage(), stream, running
    )
    assert result.whole and result.text.startswith("fake reply to: what is the plan?")
    assert stream.text == result.text
    assert chain is None  # the chat completions API keeps no chain
    [request] = llm.requests
    assert request["model"] == "main-model"
    # The call's usage is counted (beside the reply, once the stream has ended).
    counted = Keys.usage("model", "openai/main-model")
    async with asyncio.timeout(5):
        while not await turns.sessions.redis.exists(counted):
            await asyncio.sleep(0.02)
