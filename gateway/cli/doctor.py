"""`gateway doctor`: Redis (its mode, nodes and scripts, `doctor_redis.py`), the model,
each enabled platform and the tool servers, one line each; exit 1 when one fails."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import redis.asyncio as aioredis

from gateway.cli.doctor_redis import doctor_redis
from gateway.cli.tools import doctor_tools
from gateway.errors import GatewayError
from gateway.settings.env import Settings
from gateway.state import keys

Rows = list[tuple[str, bool, str]]  # (what, ok, detail)


async def cmd_doctor(
    settings: Settings,
    args: argparse.Namespace,
    *,
    platforms: Callable[[Settings], Awaitable[Rows]],
) -> int:
    """`platforms` checks each enabled platform (the composition root's: only it loads
    the adapters)."""
    from gateway.models import ModelCall, Models

    results = await doctor_redis(settings)
    try:
        call = ModelCall(
            settings.model,
            [{"role": "user", "content": "ping"}],
            timeout=min(30.0, settings.model_timeout),
            max_tokens=5,
        )
        await Models.for_settings(settings).complete(call)
        results.append(("model", True, settings.model))
    except GatewayError as exc:
        results.append(("model", False, f"{settings.model}: {exc}"))
    results.extend(await platforms(settings))
    results.extend(await doctor_tools(settings))
    for name, ok, detail in results:
        print(f"{'ok  ' if ok else 'FAIL'}  {name:<9} {detail}")
    return 0 if all(ok for _, ok, _ in results) else 1


@contextlib.asynccontextmanager
async def doctor_client(settings: Settings) -> AsyncIterator[aioredis.Redis]:
    """Platforms are checked without touching Redis, unless their tokens live there
    (Slack installed in many workspaces)."""
    if not settings.slack_many_workspaces:
        client = aioredis.Redis()
        try:
            yield client
        finally:
            await client.aclose()
        return
    async with keys.open_redis(
        settings.redis_url, settings.data_dir, settings.redis_options
    ) as client:
        yield client
