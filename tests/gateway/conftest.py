"""Fixtures of the core's tests: one worker or two, in process (tests/support/harness.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.fakes.llm_server import FakeLLM
from tests.support.harness import Harness, start_workers


@pytest.fixture
async def harness(redis_url: str, llm: FakeLLM) -> AsyncIterator[Harness]:
    async with start_workers(redis_url, llm, 1) as h:
        yield h


@pytest.fixture
async def two_workers(redis_url: str, llm: FakeLLM) -> AsyncIterator[Harness]:
    async with start_workers(redis_url, llm, 2) as h:
        yield h
