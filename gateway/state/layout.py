"""Which key layout a database holds, checked before a process uses it.

Version 1 named a session's keys by the session (`gw:{<session key>}:…`), one job
stream per platform and the global keys without a tag; version 2 is the layout of
`gateway/state/keys.py`, every multi-key step on one slot, for a given number of
shards. The layout is recorded in `Keys.LAYOUT` by the first process that finds an
empty database, and by `gateway migrate` once it has moved a version 1 database.
A process refuses (LayoutMismatch) a database of version 1 or of another shard
count: its keys would not be found, and new ones would be written beside them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from redis.asyncio import Redis

from gateway.errors import LayoutMismatch
from gateway.state import shards
from gateway.state.keys import Keys

VERSION = 2
# Keys every version 1 database that took any message has (its session index, its
# metrics); one that has neither holds nothing that must be moved.
V1_MARKS = ("gw:sessions", "gw:metrics", "gw:settings:version")


@dataclass(frozen=True, slots=True)
class Layout:
    version: int
    shards: int


async def stored(redis: Redis) -> Layout | None:
    """The layout recorded here; version 1 when none is but version 1 keys are found;
    None for an empty database."""
    found = cast(dict[str, str], await redis.hgetall(Keys.LAYOUT))
    if found:
        return Layout(int(found["version"]), int(found["shards"]))
    for key in V1_MARKS:
        if await redis.exists(key):
            return Layout(1, 1)
    return None


async def record(redis: Redis) -> None:
    """This process's layout, recorded as the database's."""
    mapping: dict[str | bytes, str | int] = {"version": VERSION, "shards": shards.count()}
    await redis.hset(Keys.LAYOUT, mapping=mapping)  # type: ignore[arg-type]


async def ensure(redis: Redis) -> None:
    """Record the layout in an empty database; refuse one laid out otherwise."""
    found = await stored(redis)
    if found is None:
        await record(redis)
    elif found.version != VERSION:
        raise LayoutMismatch(
            "Redis holds an older key layout (version 1): stop the gateway's processes "
            "and run `gateway migrate` once"
        )
    elif found.shards != shards.count():
        raise LayoutMismatch(
            f"Redis holds keys laid out for {found.shards} job shards but "
            f"GATEWAY_JOB_SHARDS is {shards.count()}: the count is fixed for a deployment"
        )
