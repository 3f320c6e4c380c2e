"""Fixtures of the turn's tests: a worker's real TurnRunner, built and not started, so a
test drives one of its parts (claims, generation, preparation, replies) itself."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from gateway.turn.runner import TurnRunner
from gateway.worker import Worker
from tests.fakes.llm_server import FakeLLM
from tests.support.helpers import settings
from tests.support.recording_sender import RecordingSender


@pytest.fixture
def sender() -> RecordingSender:
    return RecordingSender()


@pytest.fixture
async def turns(
    redis_url: str, redis_client: aioredis.Redis, llm: FakeLLM, sender: RecordingSender
) -> AsyncIterator[TurnRunner]:
    """The turn parts of a worker with the loopback model and the recording sender."""
    config = settings(
        redis_url,
        GATEWAY_MODEL="openai/main-model",
        GATEWAY_API_BASE=llm.api_base,
        GATEWAY_API_KEY="sk-test-key",
        GATEWAY_MODEL_RETRIES=1,
        GATEWAY_LEASE_TTL=2.0,
    )
    worker = Worker(config, redis_client, {"test": sender})
    yield worker.turns
    await worker.models.aclose()
