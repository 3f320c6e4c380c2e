"""Builders shared by the core's tests."""

from __future__ import annotations

import itertools
from typing import Any

from gateway.messages import Address, Inbound, Speaker
from gateway.settings.env import Settings

_ids = itertools.count(1)


def settings(redis_url: str, **values: Any) -> Settings:
    """Settings as the CLI would build them, from explicit values only (no .env, no env)."""
    base: dict[str, Any] = {
        "REDIS_URL": redis_url,
        "GATEWAY_ALLOWED_USERS": "test:U1",
        "GATEWAY_LEASE_TTL": 1.0,
        # litellm in the test's own process (loaded once for the run), not in a new
        # model process per worker; models/test_pool runs the worker through one.
        "GATEWAY_MODEL_PROCESSES": 0,
    }
    base.update(values)
    return Settings(_env_file=None, **base)


def inbound(
    text: str,
    *,
    platform: str = "test",
    channel: str = "C1",
    thread: str | None = None,
    user: str = "U1",
    name: str = "Alice",
    dm: bool = True,
    event_id: str | None = None,
    **extra: Any,
) -> Inbound:
    number = next(_ids)
    address = Address(
        platform=platform, workspace="W", channel=channel, thread=thread, reply_to=str(number)
    )
    return Inbound(
        platform=platform,
        workspace="W",
        channel=channel,
        thread=thread,
        message_id=str(number),
        event_id=event_id or f"ev{number}",
        speaker=Speaker(id=user, name=name),
        text=text,
        is_dm=dm,
        reply=address,
        side_reply=address.model_copy(update={"side": True}),
        **extra,
    )
