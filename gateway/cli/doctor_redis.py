"""`gateway doctor`'s Redis rows: the mode, the nodes it sees, and every script loading on
each primary (gateway/state/topology.py), or why Redis does not answer."""

from __future__ import annotations

from redis.exceptions import RedisError

from gateway.errors import GatewayError
from gateway.settings.env import Settings
from gateway.state import keys, topology
from gateway.state.connection import parse_url, redact_text, redact_url


async def doctor_redis(settings: Settings) -> list[tuple[str, bool, str]]:
    url = settings.redis_url
    if url is None:
        return [("redis", True, "embedded (REDIS_URL unset); started on demand")]
    client = keys.connect(url, settings.redis_options)
    try:
        await keys.ping(client, url)
        seen = await topology.survey(client, parse_url(url), settings.redis_options)
        return seen.lines()
    except GatewayError as exc:
        return [("redis", False, str(exc))]
    except (RedisError, OSError) as exc:
        detail = redact_text(f"{type(exc).__name__}: {exc}", url)
        return [("redis", False, f"{redact_url(url)}: {detail}")]
    finally:
        await client.aclose()
