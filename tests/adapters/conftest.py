"""Fixtures of the adapter tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.slack_api import FakeSlack


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    """The loopback Slack Web API (and Socket Mode), with two workspace members."""
    with FakeSlack() as fake:
        fake.add_user("U1", "Ada")
        fake.add_user("U2", "Grace")
        yield fake
