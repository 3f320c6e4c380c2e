"""Pytest fixtures for the loopback fakes (registered by tests/conftest.py).

Each fake has one fixture here, used by every test file that needs it. A file that
needs the fake set up differently overrides the small fixture its options come
from (as `discord_guilds` below) rather than starting a fake of its own.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest

from adapters.discord import endpoints
from tests.fakes.discord_api import FakeDiscord, FakeGuild
from tests.fakes.files import FakeFiles
from tests.fakes.llm_server import FakeLLM
from tests.fakes.telegram_api import FakeTelegram, running
from tests.support.discord_helpers import CHANNEL, GUILD

# litellm would otherwise fetch its model price map from the internet at import;
# tests only ever talk to loopback.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


# Warnings litellm's own code raises while it lazily builds its pydantic types or
# logs a call; with warnings as errors they would fail any test that calls a model.
# Narrow on purpose: anything else still fails.
LITELLM_WARNINGS = (
    "ignore:.*using the `ReadOnly` qualifier:UserWarning:pydantic",
    "ignore:Pydantic serializer warnings:UserWarning:pydantic",
    "ignore:Accessing the 'model_.*' attribute on the instance is deprecated:DeprecationWarning",
)


def pytest_configure(config: pytest.Config) -> None:
    for line in LITELLM_WARNINGS:
        config.addinivalue_line("filterwarnings", line)


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    """A fresh fake model server for the test: `llm.api_base`, `llm.requests`, scripting."""
    with FakeLLM() as server:
        yield server


@pytest.fixture
async def files() -> AsyncIterator[FakeFiles]:
    """A loopback file host in the test's loop: `files.add(name, data, ...)` gives a URL."""
    server = FakeFiles()
    await server.serve()
    yield server
    await server.close()


@pytest.fixture
async def fake_telegram() -> AsyncIterator[FakeTelegram]:
    """The loopback Telegram Bot API, started in the test's loop (bot token and username
    from `tests.fakes.telegram_api.running`)."""
    async with running() as server:
        yield server


@pytest.fixture
def discord_guilds() -> tuple[FakeGuild, ...]:
    """The guilds `fake_discord` serves: one guild with one channel. A test module that
    needs others (more guilds, members with permissions) overrides this fixture."""
    return (FakeGuild(GUILD, channels=(CHANNEL,)),)


@pytest.fixture
async def fake_discord(discord_guilds: tuple[FakeGuild, ...]) -> AsyncIterator[FakeDiscord]:
    """The loopback Discord REST API and Gateway serving `discord_guilds`, with this
    process's discord.py pointed at it for the test (and back at Discord after)."""
    async with FakeDiscord(guilds=discord_guilds) as server:
        endpoints.apply(server.api_url, server.gateway_url)
        yield server
    endpoints.apply(None, None)
