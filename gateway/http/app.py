"""The HTTP app of `gateway web`: adapter routes, `/healthz`, `/metrics` (and `/admin`,
the operator console, which the command passes in: gateway/console/).

Stateless: every request reads or writes Redis, so any number of these can
run behind a load balancer. It never imports litellm. Every route sits behind
`BodyLimit` (gateway/http/limits.py), so no route reads an unbounded body.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry
from redis.asyncio import Redis
from redis.exceptions import RedisError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from gateway import metrics
from gateway.http.limits import BodyLimit
from gateway.inbound.ingest import Ingest
from gateway.platform import Platform
from gateway.state import health, processes

log = logging.getLogger(__name__)

# Probes give up after 1 to 5 s. The Redis client retries a lost connection for
# about 9 s, which is right for ingest and wrong here: past this, Redis counts as down.
PROBE_TIMEOUT = 0.3
REDIS_DOWN = (RedisError, OSError, TimeoutError)


def create_app(
    redis: Redis,
    ingest: Ingest,
    platforms: Sequence[Platform],
    platform_names: Sequence[str],
    extra: Sequence[BaseRoute] = (),
) -> Starlette:
    """The app, with each HTTP platform's routes mounted and started in the lifespan, and
    `extra` routes beside them (the operator console, when it is configured)."""

    async def healthz(request: Request) -> Response:
        try:
            async with asyncio.timeout(PROBE_TIMEOUT):
                connections = await health.read_all(redis)  # also the proof that Redis answers
        except REDIS_DOWN as exc:
            log.warning("/healthz: Redis does not answer (%s)", type(exc).__name__)
            return JSONResponse({"status": "down", "redis": "down"}, status_code=503)
        degraded = any(not report.get("up") for report in connections.values())
        return JSONResponse(
            {"status": "degraded" if degraded else "ok", "redis": "up", "connections": connections}
        )

    async def metrics_endpoint(request: Request) -> Response:
        try:
            async with asyncio.timeout(PROBE_TIMEOUT):
                values, depth = await metrics.snapshot(redis, platform_names)
        except REDIS_DOWN as exc:
            log.warning("/metrics: Redis does not answer (%s)", type(exc).__name__)
            return PlainTextResponse("redis down", status_code=503)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(metrics.SnapshotCollector(values, depth))
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        alive = asyncio.create_task(processes.keep_alive(redis, "web", processes.process_name()))
        for platform in platforms:
            await platform.startup()
        try:
            yield
        finally:
            for platform in platforms:
                await platform.shutdown()
            alive.cancel()
            await asyncio.gather(alive, return_exceptions=True)

    routes: list[BaseRoute] = [Route("/healthz", healthz), Route("/metrics", metrics_endpoint)]
    for platform in platforms:
        routes.extend(platform.routes(ingest))
    routes.extend(extra)
    return Starlette(routes=routes, lifespan=lifespan, middleware=[Middleware(BodyLimit)])
