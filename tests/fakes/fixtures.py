"""Pytest fixtures for the loopback fakes (registered by tests/conftest.py)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest

from tests.fakes.files import FakeFiles
from tests.fakes.llm_server import FakeLLM

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
